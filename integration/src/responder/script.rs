//! A node's script: the steps a [`Behaviour`] takes for one signal, scripted failures
//! included. Pure; `super::driver` carries the steps out.

use autopilot_api::signal::SignalPhase;

use super::behaviour::{Behaviour, Release};
use super::record::CommandKind;

/// One step of a node's script.
#[derive(Clone, Debug)]
pub(super) enum Step {
    /// Write this phase (with this reason).
    Write(SignalPhase, Option<String>),
    /// Wait until the release is open.
    Wait(Release),
    /// Wait until someone else (the leader) has written this phase onto the signal.
    AwaitPhase(SignalPhase),
}

/// The steps `behaviour` takes for a `command` signal (empty for [`Behaviour::Hold`]).
pub(super) fn script(behaviour: &Behaviour, command: CommandKind) -> Vec<Step> {
    use SignalPhase::{
        ApplyingUpdate, Completed, Cordoning, Downloading, FailedDownload, Restarting, Uncordoning,
    };
    let success: &[SignalPhase] = match command {
        CommandKind::K0sUpdate => {
            &[Downloading, Cordoning, ApplyingUpdate, Restarting, Uncordoning, Completed]
        }
        CommandKind::AirgapUpdate => &[Downloading, Completed],
    };
    let write = |phase: &SignalPhase| Step::Write(*phase, None);
    match behaviour {
        Behaviour::Complete => success.iter().map(write).collect(),
        Behaviour::AlreadyUpToDate => vec![write(&Completed)],
        Behaviour::CompleteWithLeader => match command {
            CommandKind::K0sUpdate => vec![
                write(&Downloading),
                write(&Cordoning),
                Step::AwaitPhase(ApplyingUpdate),
                write(&Restarting),
                write(&Uncordoning),
            ],
            CommandKind::AirgapUpdate => success.iter().map(write).collect(),
        },
        Behaviour::Hold => Vec::new(),
        Behaviour::CompleteAfter(release) => {
            let mut steps = vec![write(&Downloading), Step::Wait(release.clone())];
            steps.extend(success[1..].iter().map(write));
            steps
        }
        Behaviour::Fail { phase, reason } => {
            let before: &[SignalPhase] = match (phase, command) {
                (FailedDownload, _) | (_, CommandKind::AirgapUpdate) => &[Downloading],
                (_, CommandKind::K0sUpdate) => &[Downloading, Cordoning, ApplyingUpdate],
            };
            let mut steps: Vec<Step> = before.iter().map(write).collect();
            steps.push(Step::Write(*phase, Some(reason.clone())));
            steps
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hold_writes_nothing_and_complete_after_waits_after_downloading() {
        assert!(script(&Behaviour::Hold, CommandKind::K0sUpdate).is_empty());
        let steps = script(&Behaviour::CompleteAfter(Release::new()), CommandKind::AirgapUpdate);
        assert!(matches!(
            steps.as_slice(),
            [
                Step::Write(SignalPhase::Downloading, None),
                Step::Wait(_),
                Step::Write(SignalPhase::Completed, None)
            ]
        ));
    }

    #[test]
    fn a_failed_download_fails_right_after_downloading() {
        let steps =
            script(&Behaviour::fail(SignalPhase::FailedDownload, "bad"), CommandKind::K0sUpdate);
        let phases: Vec<_> = steps
            .iter()
            .map(|s| match s {
                Step::Write(p, r) => (*p, r.clone()),
                Step::Wait(_) | Step::AwaitPhase(_) => unreachable!(),
            })
            .collect();
        assert_eq!(
            phases,
            vec![
                (SignalPhase::Downloading, None),
                (SignalPhase::FailedDownload, Some("bad".to_owned()))
            ]
        );
    }
}

//! What a rule reads of one pass over one command ([`CommandView`]) and what it concludes
//! ([`Verdict`]). A rule never writes the status: the driver applies its verdict.

use std::time::Duration;

use autopilot_api::v1beta2::{PlanCommandStatus, PlanStateType};

use super::command::{Command, RunIdentity};
use super::inputs::Inputs;

/// One pass over one command, read-only: what every rule judges by.
#[derive(Clone, Copy)]
pub struct CommandView<'p> {
    /// The snapshot, the policy and the time.
    pub inputs: &'p Inputs<'p>,
    /// The run the command belongs to.
    pub run: &'p RunIdentity,
    /// The command, resolved from its frozen copy.
    pub command: Command<'p>,
    /// The command's status as the pass found it so far.
    pub status: &'p PlanCommandStatus,
    /// How descriptions name the command: `command <index> (<kind>)`.
    pub label: &'p str,
}

/// What a rule concludes about the command in this pass.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Nothing this rule judges holds the command: the next step may act.
    Go,
    /// The command waits, and why.
    Hold(Hold),
    /// The command ends in a failure state.
    End {
        /// The state (`ApplyFailed`, …).
        state: PlanStateType,
        /// The description: what failed, naming the nodes.
        description: String,
    },
}

/// Why, and until when, a command waits.
#[derive(Clone, Debug, PartialEq)]
pub struct Hold {
    /// `SchedulableWait` (work is out, or a clock runs) or `Schedulable` (nothing can go).
    pub state: PlanStateType,
    /// The command's `reason`; `None` leaves it to what holds the command (a gate run
    /// names itself).
    pub why: Option<String>,
    /// The hold's kind, for its Event (`phases::reasons`); `None`: no Event.
    pub kind: Option<&'static str>,
    /// When to look again (the end of a soak, a retry).
    pub until: Option<Duration>,
}

impl Hold {
    /// A `SchedulableWait` hold saying nothing of its own (what it waits for names itself).
    pub fn quiet() -> Self {
        Self { state: PlanStateType::SchedulableWait, why: None, kind: None, until: None }
    }
}

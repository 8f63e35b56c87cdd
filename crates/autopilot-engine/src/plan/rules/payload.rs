//! Payload authentication, decided at NewPlan (DESIGN §11 "Authenticated payloads").
//!
//! `sha256` is optional on the wire (k0s compatibility), so a platform entry may name a
//! payload that no node can check. Without a digest, only TLS vouches for what arrives:
//! an `https://` entry is accepted with a Warning Event, anything else (plain `http://`) is
//! refused unless the controller runs with `--allow-unverified-payloads`.
//!
//! Every platform entry of every command is checked, not only the platforms the plan's
//! targets need: the answer then depends on the spec alone (not on which nodes exist when
//! the run starts), and an entry no node uses today cannot become a path around the rule
//! when a node of that platform is added and the plan is rerun.

use crate::plan::model::command::Command;
use crate::plan::model::decision::{Effect, EventKind};
use crate::plan::model::phases::reasons;

/// How an unverified payload reaches the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::plan) enum Transport {
    /// `https://`: the server is authenticated, the bytes are not checked.
    Https,
    /// `http://` (or any other scheme): nothing authenticates the bytes.
    Plain,
}

/// A platform entry a node would download without an integrity check: no `sha256`, or an
/// empty one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::plan) struct Unverified<'a> {
    /// The `platforms` key, e.g. `linux-amd64`.
    pub(in crate::plan) platform: &'a str,
    /// The entry's URL, as written.
    pub(in crate::plan) url: &'a str,
    /// How it is fetched.
    pub(in crate::plan) transport: Transport,
}

/// The platform entries of `command` without a usable `sha256`, in `platforms` key order.
pub(in crate::plan) fn unverified(command: Command<'_>) -> Vec<Unverified<'_>> {
    command
        .platforms()
        .iter()
        .filter(|(_, entry)| entry.sha256.as_deref().is_none_or(|sha| sha.trim().is_empty()))
        .map(|(platform, entry)| Unverified {
            platform,
            url: &entry.url,
            transport: transport(&entry.url),
        })
        .collect()
}

/// `Https` for an `https://` URL (scheme compared without regard to case), `Plain` for
/// anything else.
pub(in crate::plan) fn transport(url: &str) -> Transport {
    let scheme = url.trim_start().split_once("://").map(|(scheme, _)| scheme);
    if scheme.is_some_and(|scheme| scheme.eq_ignore_ascii_case("https")) {
        Transport::Https
    } else {
        Transport::Plain
    }
}

/// What NewPlan makes of a command's unverified entries.
#[derive(Debug, Default, PartialEq)]
pub(in crate::plan) struct Verdict {
    /// Why the command is refused (`None`: accepted). Names every refused entry and how to
    /// fix it.
    pub(in crate::plan) refusal: Option<String>,
    /// One Warning Event per entry that is accepted but downloaded without an integrity
    /// check; published once per run, when the run gets past NewPlan.
    pub(in crate::plan) warnings: Vec<Effect>,
}

/// Judge the unverified entries of command `label` (`command 0 (k0supdate)`):
/// plain-transport entries are refused unless `allow_unverified` (the controller's
/// `--allow-unverified-payloads`); every entry that is accepted gets a warning.
pub(in crate::plan) fn judge(label: &str, command: Command<'_>, allow_unverified: bool) -> Verdict {
    let entries = unverified(command);
    let refused: Vec<String> = entries
        .iter()
        .filter(|entry| entry.transport == Transport::Plain && !allow_unverified)
        .map(|entry| format!("platform {} ({})", entry.platform, entry.url))
        .collect();
    if !refused.is_empty() {
        let refusal = format!(
            "{label}: {} {} no sha256 and {} not https, so nothing would check what the nodes \
             download; give {} sha256, serve {} over https, or run the controller with \
             --allow-unverified-payloads",
            refused.join(", "),
            if refused.len() == 1 { "has" } else { "have" },
            if refused.len() == 1 { "is" } else { "are" },
            if refused.len() == 1 { "its" } else { "their" },
            if refused.len() == 1 { "it" } else { "them" },
        );
        return Verdict { refusal: Some(refusal), warnings: Vec::new() };
    }
    let warnings = entries
        .iter()
        .map(|entry| {
            let how = match entry.transport {
                Transport::Https => "over https".to_owned(),
                Transport::Plain => {
                    "over plain http (allowed by --allow-unverified-payloads)".to_owned()
                }
            };
            Effect::Event {
                kind: EventKind::Warning,
                reason: reasons::UNVERIFIED_PAYLOAD,
                note: format!(
                    "{label}: platform {} ({}) has no sha256: it is downloaded {how} without \
                     an integrity check; give its sha256 to have every node verify it",
                    entry.platform, entry.url
                ),
            }
        })
        .collect();
    Verdict { refusal: None, warnings }
}

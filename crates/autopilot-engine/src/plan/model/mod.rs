//! The words every rule and the driver share: a command and its groups and targets, the
//! run it belongs to, what a pass reads (the snapshot, the policy, the time) and what it
//! decides (effects, needs, holds), the declared phase tables, and the text the status
//! shows. Nothing here imports a rule or the driver.

pub mod command;
pub mod decision;
pub mod inputs;
pub mod labels;
pub mod lookups;
pub mod phases;
pub mod selector;
pub mod text;
pub mod verdict;

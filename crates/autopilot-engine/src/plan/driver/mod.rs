//! The driver: one pass over a Plan in numbered steps ([`machine`]), applying the rules'
//! verdicts in one documented order. It alone writes a command's status and emits effects.

pub mod access;
pub mod budget;
pub mod conditions;
pub mod discovery;
pub mod gating;
pub mod machine;
pub mod preflight;
pub mod progress;
pub mod resolve;
pub mod rollback;
pub mod rollout;
pub mod schedule;
pub mod staging;

//! The rules of a rollout: each a pure function of the model ([`super::model`]) that
//! returns a verdict and never writes the status. The driver applies the verdicts.

pub mod checks;
pub mod gates;
pub mod payload;
pub mod prestage;
pub mod rbac;
pub mod removed_apis;
pub mod skew;
pub mod soak;
pub mod spec_skew;
pub mod targets;
pub mod waves;
pub mod window;

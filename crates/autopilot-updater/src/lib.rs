//! Automatic k0s updates: `UpdateConfig`, update-server channels and maintenance windows.
//!
//! - [`version`]: k0s version ordering (`v1.35.1+k0s.0 < v1.35.1+k0s.1`).

pub mod channel;
pub mod cron;
pub mod decide;
pub mod source;
pub mod version;
pub mod window;

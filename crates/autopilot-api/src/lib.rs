//! The contract between the parts of autopilot.

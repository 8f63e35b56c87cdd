//! autopilot-signal

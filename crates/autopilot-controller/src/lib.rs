//! autopilot-controller

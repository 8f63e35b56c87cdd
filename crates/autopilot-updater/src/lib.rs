//! autopilot-updater

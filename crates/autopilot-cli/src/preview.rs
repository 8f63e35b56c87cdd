//! `k0s autopilot preview -f plan.yaml` (not written yet).

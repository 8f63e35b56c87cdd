//! The end-to-end scenarios: real `k0s` controller and worker processes against a real etcd
//! and kube-apiserver (the `integration` harness), one module per scenario, all in this one
//! test binary (one link step instead of one per scenario).
//!
//! A test's name is `<scenario>::<test>`: `cargo xtask test -p integration --test e2e
//! plan_quorum` runs one scenario, `-- --exact chaos::leader_kills` one test. Every scenario
//! starts its own cluster (its own directory, ports and processes), so scenarios share this
//! process safely; `RUST_TEST_THREADS` (2 under `cargo xtask test`) bounds how many run at once.
//!
//! `support` holds `FleetBuilder`, through which every scenario starts its cluster and nodes,
//! and the helpers of the plan and update scenarios; `updater_support` those of the
//! `updater_*` scenarios.

mod support;
mod updater_support;

mod capi_k0smotron;
mod chaos;
mod cli;
mod cli_preview;
mod cli_status;
mod cli_steer;
mod components_staging;
mod controller_startup;
mod dist;
mod docs;
mod gitops_health;
mod harness_smoke;
mod leader_election;
mod metrics;
mod node_status;
mod plan_api_outage;
mod plan_bounds;
mod plan_central_drain;
mod plan_clock_ahead;
mod plan_commands;
mod plan_concurrency;
mod plan_drain_like_kubectl;
mod plan_events;
mod plan_failover;
mod plan_failure_policy;
mod plan_gates;
mod plan_pause_abort;
mod plan_platforms;
mod plan_preflight;
mod plan_prestage;
mod plan_progress_deadline;
mod plan_quorum;
mod plan_quorum_safety;
mod plan_real_agents;
mod plan_removed_apis;
mod plan_reruns;
mod plan_rollback;
mod plan_rollout_shape;
mod plan_selector;
mod plan_single_node;
mod plan_skew;
mod plan_targets;
mod plan_validation;
mod plan_waves;
mod plan_window;
mod plan_worker_rbac;
mod prometheus_harness;
mod promotion;
mod rbac_least_privilege;
mod rbac_steering;
mod real_nodes;
mod real_nodes_kubernetes_upgrade;
mod real_nodes_run_by_k0s;
mod responder;
mod rollback_signal_node;
mod security_check_pods;
mod security_payload_keys;
mod security_signal_forgery;
mod systemd_units;
mod update_agent_crash;
mod update_airgap;
mod update_api_outage;
mod update_bad_payload;
mod update_controller_workers;
mod update_controllers;
mod update_cosign_formats;
mod update_drain_pdb;
mod update_ha3x3;
mod update_post_watch;
mod update_post_watch_outage;
mod update_proxy;
mod update_resume;
mod update_rollback;
mod update_signed_payload;
mod update_single;
mod update_stop;
mod update_unrunnable_payload;
mod update_unverified_payload;
mod update_worker;
mod updater_cron;
mod updater_leader;
mod updater_min_interval;
mod updater_periodic;
mod updater_requests;
mod updater_rerun;
mod updater_server_errors;
mod worker_registration;

//! The upgrade-path and version skew rules of NewPlan (`crate::plan::skew`): each rule, its
//! boundary, pre-existing skew, the walk over several commands, and the allow-skew
//! annotation (which counts only when it names the plan's id).

use autopilot_api::v1beta2::{PlanStateType as P, TargetState};

use super::fixtures::*;
use crate::plan::EventKind;
use crate::plan::phases::reasons;
use crate::plan::skew::{Minor, rules};

const C31: &str = "v1.31.0+k0s.0";

/// Controllers `c1`, `c2` and workers `w1`, `w2`, every node at `v1.31.0`.
fn cluster() -> ClusterFixture {
    ClusterFixture::new()
        .controllers(["c1", "c2"])
        .workers(["w1", "w2"])
        .running("w1", C31)
        .running("w2", C31)
}

/// The first pass of `plan` on `cluster`: the plan state and command 0's description.
fn new_plan(plan: PlanFixture, cluster: ClusterFixture) -> (P, String, Sim) {
    let mut sim = Sim::new(plan, cluster);
    sim.pass();
    let description = sim.plan.command(0).description.clone().unwrap_or_default();
    (sim.plan.state(), description, sim)
}

fn refused(plan: PlanFixture, cluster: ClusterFixture) -> String {
    let (state, description, sim) = new_plan(plan, cluster);
    assert_eq!(state, P::Warning, "{description}");
    assert!(sim.plan.status().commands.iter().all(|c| c.state != P::Schedulable));
    description
}

fn runs(plan: PlanFixture, cluster: ClusterFixture) {
    let (state, description, _) = new_plan(plan, cluster);
    assert_eq!(state, P::SchedulableWait, "{description}");
}

#[test]
fn a_controller_that_would_skip_a_minor_version_is_refused_naming_the_version_to_go_through() {
    let plan = PlanFixture::k0s_update("v1.33.2+k0s.0").controllers(["c1", "c2"]);
    let description = refused(plan, cluster().running("w1", "v1.30.0+k0s.0"));
    assert!(
        description.starts_with(
            "commands[0].k0supdate.version: v1.33.2+k0s.0 breaks the version skew rules: \
             [controller-minor-skip] controllers c1, c2 (published k0s v1.31.0+k0s.0) would \
             go to v1.33.2+k0s.0 in one step, skipping v1.32; update them to a v1.32 release \
             first"
        ),
        "{description}"
    );
    assert!(
        description.ends_with(
            "To run the plan anyway, annotate it autopilot.k0sproject.io/allow-skew=id123"
        ),
        "{description}"
    );
    // Boundary: one minor version up is the path.
    runs(PlanFixture::k0s_update("v1.32.5+k0s.0").controllers(["c1", "c2"]), cluster());
}

#[test]
fn skipping_several_minor_versions_names_the_range_and_the_first_to_go_through() {
    let plan = PlanFixture::k0s_update("v1.35.0+k0s.0").controllers(["c1"]);
    let description = refused(plan, ClusterFixture::new().controllers(["c1"]));
    assert!(
        description.contains(
            "controller c1 (published k0s v1.31.0+k0s.0) would go to v1.35.0+k0s.0 in one \
             step, skipping v1.32 to v1.34; update it to a v1.32 release first"
        ),
        "{description}"
    );
}

#[test]
fn workers_newer_than_a_controller_are_refused_naming_the_controller_and_the_version() {
    let plan = PlanFixture::k0s_update("v1.32.0+k0s.0").workers(["w1", "w2"]);
    let description = refused(plan, cluster());
    assert!(
        description.contains(
            "[worker-newer-than-controller] workers w1, w2 (planned k0s v1.32.0+k0s.0) would \
             be newer than controller c1 (published k0s v1.31.0+k0s.0); update the controllers \
             to v1.32 first (controllers go first)"
        ),
        "{description}"
    );
    assert!(description.contains("newer than controller c2"), "{description}");
    // Boundary: a patch release of the controllers' minor version is fine for workers.
    runs(PlanFixture::k0s_update("v1.31.9+k0s.2").workers(["w1", "w2"]), cluster());
    // And controllers first, then workers, in one command, is the path.
    runs(
        PlanFixture::k0s_update("v1.32.0+k0s.0").controllers(["c1", "c2"]).workers(["w1", "w2"]),
        cluster(),
    );
}

#[test]
fn a_controller_left_behind_counts_even_when_the_others_go_first() {
    let plan = PlanFixture::k0s_update("v1.32.0+k0s.0").controllers(["c1"]).workers(["w1"]);
    let description = refused(plan, cluster());
    assert!(
        description
            .contains("worker w1 (planned k0s v1.32.0+k0s.0) would be newer than controller c2"),
        "{description}"
    );
    assert!(!description.contains("controller c1 ("), "{description}");
}

#[test]
fn workers_left_behind_by_their_own_version_hold_no_controller_update_and_are_named() {
    // w1 and w2 publish v1.30.4 (the truth, or a lie): the controllers go on to v1.32, and a
    // Warning Event names each worker, its version and the rule.
    let old = cluster().running("w1", "v1.30.4+k0s.0").running("w2", "v1.30.4+k0s.0");
    let mut sim = Sim::new(PlanFixture::k0s_update("v1.32.1+k0s.0").controllers(["c1", "c2"]), old);
    let t = sim.pass();
    assert_eq!(sim.plan.state(), P::SchedulableWait, "the controllers' update runs");
    assert_eq!(signalled(&t).len(), 1, "c1 is signalled: {t:#?}");
    let left: Vec<String> = events(&t)
        .into_iter()
        .filter(|(kind, reason, _)| {
            *kind == EventKind::Warning && *reason == reasons::VERSION_SKEW_LEFT_BEHIND
        })
        .map(|(_, _, note)| note)
        .collect();
    assert_eq!(left.len(), 2, "one per worker: {left:?}");
    assert!(
        left[0].starts_with(
            "Node w1 is no target of this run, and the version it reports about itself (its \
             kubelet's, else the k0s version it publishes) breaks the version skew rules once \
             the run has moved the controllers: [worker-too-old] worker w1 (published k0s \
             v1.30.4+k0s.0) would be 2 minor versions behind controller c1 (planned k0s \
             v1.32.1+k0s.0); update the workers to v1.31 first"
        ),
        "{left:?}"
    );
    // Boundary: one minor behind is fine, and says nothing.
    let (_, _, sim) =
        new_plan(PlanFixture::k0s_update("v1.32.1+k0s.0").controllers(["c1", "c2"]), cluster());
    assert_eq!(sim.plan.state(), P::SchedulableWait);
}

#[test]
fn a_worker_target_whose_own_version_breaks_a_rule_fails_alone_within_max_failures() {
    // w2 claims v1.20: once the controllers are on v1.32 it would be far behind them before
    // its own turn. Only w2 fails; w1 and the controllers update.
    let lying = cluster().running("w2", "v1.20.0+k0s.0");
    let plan = PlanFixture::k0s_update("v1.32.0+k0s.0")
        .controllers(["c1", "c2"])
        .workers(["w1", "w2"])
        .max_failures(1);
    let (state, _, sim) = new_plan(plan.clone(), lying.clone());
    assert_eq!(state, P::SchedulableWait);
    assert_eq!(sim.plan.target_state(0, "w1"), TargetState::SignalPending);
    let w2 = sim.plan.target(0, "w2");
    assert_eq!(w2.state, TargetState::SignalApplyFailed);
    let reason = w2.reason.clone().unwrap_or_default();
    assert!(
        reason.starts_with(
            "not signalled: the version Node w2 reports about itself (its kubelet's, else the \
             k0s version it publishes) breaks the version skew rules: [worker-too-old] worker \
             w2 (published k0s v1.20.0+k0s.0) would be 12 minor versions behind controller c1 \
             (planned k0s v1.32.0+k0s.0)"
        ),
        "{reason}"
    );
    assert!(
        reason.ends_with(
            "Only this node fails, as the rule rests on its own report; to update it anyway, \
             annotate the plan autopilot.k0sproject.io/allow-skew=id123"
        ),
        "{reason}"
    );
    // The operator's override updates it like the others.
    let (state, _, sim) = new_plan(plan.allowing_skew("id123"), lying);
    assert_eq!(state, P::SchedulableWait);
    assert_eq!(sim.plan.target_state(0, "w2"), TargetState::SignalPending);
}

#[test]
fn a_controllers_own_version_still_refuses_the_plan() {
    // c2 claims v1.30: the workers' update would leave them newer than it; the control
    // plane's skew is what the rules are for, so the plan is refused, not c2 alone failed.
    let plan = PlanFixture::k0s_update("v1.32.0+k0s.0").workers(["w1", "w2"]).max_failures(2);
    let claims = cluster().running("c1", "v1.32.0+k0s.0").running("c2", "v1.30.0+k0s.0");
    let description = refused(plan, claims);
    assert!(description.contains("[worker-newer-than-controller]"), "{description}");
    assert!(description.contains("controller c2 (published k0s v1.30.0+k0s.0)"), "{description}");
}

#[test]
fn controllers_more_than_one_minor_apart_are_refused_naming_the_one_to_update_first() {
    let apart = cluster().running("c2", "v1.30.0+k0s.0").running("w1", "v1.30.0+k0s.0");
    let apart = apart.running("w2", "v1.30.0+k0s.0");
    let plan = PlanFixture::k0s_update("v1.32.0+k0s.0").controllers(["c1"]);
    let description = refused(plan, apart.clone());
    assert!(
        description.contains(
            "[controller-skew] controller c2 (published k0s v1.30.0+k0s.0) would be 2 minor \
             versions behind controller c1 (planned k0s v1.32.0+k0s.0); update c2 to v1.31 \
             first"
        ),
        "{description}"
    );
    // Boundary: one minor apart is fine (c2 at v1.31 while c1 goes to v1.32).
    runs(PlanFixture::k0s_update("v1.32.0+k0s.0").controllers(["c1"]), cluster());
}

#[test]
fn a_skew_the_plan_found_and_does_not_deepen_does_not_refuse_it() {
    // w1 is already two minor versions behind; the plan updates w2 within the rules, and
    // then w1 one step closer.
    let skewed = cluster().running("c1", "v1.32.0+k0s.0").running("c2", "v1.32.0+k0s.0");
    let skewed = skewed.running("w1", "v1.30.0+k0s.0");
    runs(PlanFixture::k0s_update("v1.32.0+k0s.0").workers(["w2"]), skewed.clone());
    runs(PlanFixture::k0s_update("v1.31.5+k0s.0").workers(["w1"]), skewed);
}

#[test]
fn the_commands_are_walked_in_order() {
    // Controllers, then workers, in two commands: the path.
    let ordered = PlanFixture::k0s_update("v1.32.0+k0s.0")
        .controllers(["c1", "c2"])
        .then_k0s_update("v1.32.0+k0s.0")
        .workers(["w1", "w2"]);
    runs(ordered, cluster());
    // Workers first: refused at the first command, nothing signalled.
    let reversed = PlanFixture::k0s_update("v1.32.0+k0s.0")
        .workers(["w1", "w2"])
        .then_k0s_update("v1.32.0+k0s.0")
        .controllers(["c1", "c2"]);
    let description = refused(reversed, cluster());
    assert!(description.contains("worker-newer-than-controller"), "{description}");
    // Two steps of one minor each for the controllers: the second command skips from where
    // the first one left them, so it does not.
    let two_steps = PlanFixture::k0s_update("v1.32.0+k0s.0")
        .controllers(["c1", "c2"])
        .workers(["w1", "w2"])
        .then_k0s_update("v1.33.0+k0s.0")
        .controllers(["c1", "c2"])
        .workers(["w1", "w2"]);
    runs(two_steps, cluster());
    // A skip in the second command refuses the plan there, before the first signals anyone.
    let late = PlanFixture::k0s_update("v1.32.0+k0s.0")
        .controllers(["c1", "c2"])
        .then_k0s_update("v1.34.0+k0s.0")
        .controllers(["c1", "c2"]);
    let (state, _, sim) = new_plan(late, cluster());
    assert_eq!(state, P::Warning);
    assert_eq!(sim.plan.command(0).state, P::SchedulableWait);
    let second = sim.plan.command(1).description.clone().unwrap_or_default();
    assert!(second.starts_with("commands[1].k0supdate.version: v1.34.0+k0s.0"), "{second}");
    assert!(second.contains("(planned k0s v1.32.0+k0s.0) would go to v1.34.0+k0s.0"), "{second}");
}

#[test]
fn nodes_without_a_version_and_versions_that_do_not_parse_are_not_judged() {
    // The fixture's workers publish v1.30.0 unless told otherwise; drop w1's.
    let mut unknown = cluster();
    unknown.nodes.get_mut("w1").expect("w1").version = None;
    unknown = unknown.running("w2", "nightly");
    runs(PlanFixture::k0s_update("v1.32.0+k0s.0").controllers(["c1", "c2"]), unknown);
}

#[test]
fn a_controller_worker_is_judged_once_as_a_controller() {
    let both = ClusterFixture::new().controller_workers(["cw1"]).running("cw1", C31);
    runs(PlanFixture::k0s_update("v1.32.0+k0s.0").controllers(["cw1"]), both.clone());
    let description = refused(PlanFixture::k0s_update("v1.33.0+k0s.0").controllers(["cw1"]), both);
    assert!(description.contains("controller cw1 (published k0s"), "{description}");
}

#[test]
fn the_allow_skew_annotation_naming_the_plan_id_lets_the_plan_run_with_a_warning_event() {
    let plan = PlanFixture::k0s_update("v1.33.0+k0s.0").controllers(["c1", "c2"]);
    let mut sim = Sim::new(plan.allowing_skew(" id123 "), cluster());
    let t = sim.pass();
    assert_eq!(sim.plan.state(), P::SchedulableWait);
    let allowed: Vec<_> = events(&t)
        .into_iter()
        .filter(|(_, reason, _)| *reason == reasons::VERSION_SKEW_ALLOWED)
        .collect();
    assert_eq!(allowed.len(), 1, "{:?}", events(&t));
    assert_eq!(allowed[0].0, EventKind::Warning);
    assert!(
        allowed[0].2.contains("[controller-minor-skip] controllers c1, c2"),
        "{}",
        allowed[0].2
    );
}

#[test]
fn the_allow_skew_annotation_naming_another_plan_id_does_not_count_and_the_refusal_says_so() {
    let plan = PlanFixture::k0s_update("v1.33.0+k0s.0").controllers(["c1", "c2"]);
    let description = refused(plan.allowing_skew("an-earlier-plan"), cluster());
    assert!(
        description.ends_with(
            "annotate it autopilot.k0sproject.io/allow-skew=id123 (the annotation names plan \
             id \"an-earlier-plan\", not this plan's id \"id123\")"
        ),
        "{description}"
    );
}

#[test]
fn an_airgap_bundle_changes_no_version() {
    runs(PlanFixture::airgap_update("v1.35.0+k0s.0").workers(["w1"]), cluster());
}

#[test]
fn minor_lines_read_any_build_and_prerelease_and_every_rule_has_a_name() {
    assert_eq!(Minor::of("v1.35.1+k0s.0").map(|m| m.to_string()).as_deref(), Some("v1.35"));
    assert_eq!(Minor::of("1.35.0-rc.1+k0s.0"), Minor::of("v1.35.9"));
    assert_eq!(Minor::of("latest"), None);
    assert_eq!(rules::ALL.len(), 4);
}

// === From what the cluster reports ===

const K34: &str = "v1.34.0+k0s.0";
const K35: &str = "v1.35.0+k0s.0";

/// Controllers `c1`, `c2` and workers `w1`, `w2` that all publish k0s `v1.34.0`, and report
/// nothing yet (no API server answers `/version`, no kubelet reports a version).
fn published_v134() -> ClusterFixture {
    ClusterFixture::new()
        .controllers(["c1", "c2"])
        .workers(["w1", "w2"])
        .running("c1", K34)
        .running("c2", K34)
        .running("w1", K34)
        .running("w2", K34)
}

#[test]
fn a_workers_only_plan_newer_than_what_the_api_servers_report_is_refused_naming_them() {
    // The ControlNodes publish v1.35 (stale, or wrong), their API servers answer v1.34.4:
    // the API servers count, so workers going to v1.35 would be newer than them.
    let reported = published_v134()
        .running("c1", K35)
        .running("c2", K35)
        .api_server("c1", "v1.34.4")
        .api_server("c2", "v1.34.4")
        .kubelet("w1", "v1.34.4")
        .kubelet("w2", "v1.34.4");
    let plan = PlanFixture::k0s_update(K35).workers(["w1", "w2"]);
    let description = refused(plan.clone(), reported.clone());
    assert!(
        description.contains(
            "[worker-newer-than-controller] workers w1, w2 (planned k0s v1.35.0+k0s.0) would \
             be newer than controller c1 (API server v1.34.4); update the controllers to v1.35 \
             first (controllers go first)"
        ),
        "{description}"
    );
    assert!(description.contains("newer than controller c2 (API server v1.34.4)"));
    // Boundary: once the API servers answer v1.35, the workers' plan runs.
    let updated = reported.api_server("c1", "v1.35.4").api_server("c2", "v1.35.4");
    runs(plan, updated);
}

#[test]
fn api_servers_that_would_be_more_than_one_minor_apart_are_refused() {
    // c1's API server still answers v1.33 whatever c1 publishes; c2 going to v1.35 would
    // leave them two minor versions apart.
    let reported = published_v134().api_server("c1", "v1.33.7").api_server("c2", "v1.34.4");
    let plan = PlanFixture::k0s_update(K35).controllers(["c2"]);
    let description = refused(plan, reported.clone());
    assert!(
        description.contains(
            "[controller-skew] controller c1 (API server v1.33.7) would be 2 minor versions \
             behind controller c2 (planned k0s v1.35.0+k0s.0); update c1 to v1.34 first"
        ),
        "{description}"
    );
    // Boundary: c1 at v1.34 too is one minor apart.
    runs(PlanFixture::k0s_update(K35).controllers(["c2"]), reported.api_server("c1", "v1.34.2"));
}

#[test]
fn a_control_plane_jumping_two_minor_versions_by_what_its_api_servers_report_is_refused() {
    // The ControlNodes publish v1.34, their API servers answer v1.33: v1.35 skips v1.34.
    let reported = published_v134().api_server("c1", "v1.33.7").api_server("c2", "v1.33.7");
    let plan = PlanFixture::k0s_update(K35).controllers(["c1", "c2"]).workers(["w1", "w2"]);
    let description = refused(plan, reported);
    assert!(
        description.contains(
            "[controller-minor-skip] controllers c1, c2 (API server v1.33.7) would go to \
             v1.35.0+k0s.0 in one step, skipping v1.34; update them to a v1.34 release first"
        ),
        "{description}"
    );
}

#[test]
fn a_kubelet_reporting_an_old_version_fails_only_its_node_naming_the_kubelet() {
    // w2 publishes k0s v1.34, its kubelet reports v1.33: once the controllers are on v1.35
    // it would be two minor versions behind. What w2 reports about itself fails w2 alone.
    let reported = published_v134()
        .api_server("c1", "v1.34.4")
        .api_server("c2", "v1.34.4")
        .kubelet("w1", "v1.34.4")
        .kubelet("w2", "v1.33.9");
    let plan = PlanFixture::k0s_update(K35)
        .controllers(["c1", "c2"])
        .workers(["w1", "w2"])
        .max_failures(1);
    let (state, description, sim) = new_plan(plan, reported);
    assert_eq!(state, P::SchedulableWait, "{description}");
    assert_eq!(sim.plan.target_state(0, "w1"), TargetState::SignalPending);
    let w2 = sim.plan.target(0, "w2");
    assert_eq!(w2.state, TargetState::SignalApplyFailed);
    let reason = w2.reason.clone().unwrap_or_default();
    assert!(
        reason.contains(
            "[worker-too-old] worker w2 (kubelet v1.33.9) would be 2 minor versions behind \
             controller c1 (planned k0s v1.35.0+k0s.0)"
        ),
        "{reason}"
    );
}

#[test]
fn a_node_whose_kubernetes_version_is_not_reported_is_judged_by_its_published_k0s_version() {
    // c1's API server answers v1.34.4; c2's was not reached (no version), so its published
    // v1.33 counts; w1's kubelet reports nothing, so its published version counts too.
    let mixed = published_v134()
        .running("c2", "v1.33.0+k0s.0")
        .api_server("c1", "v1.34.4")
        .kubelet("w2", "v1.34.4")
        .controller_down("c2", "connection refused");
    let plan = PlanFixture::k0s_update(K35).controllers(["c1"]);
    let description = refused(plan, mixed.clone());
    assert!(
        description.contains(
            "[controller-skew] controller c2 (published k0s v1.33.0+k0s.0) would be 2 minor \
             versions behind controller c1 (planned k0s v1.35.0+k0s.0)"
        ),
        "{description}"
    );
    // A worker without a kubelet version, by its published k0s version.
    let description = refused(PlanFixture::k0s_update(K35).workers(["w1"]), mixed);
    assert!(
        description.contains(
            "worker w1 (planned k0s v1.35.0+k0s.0) would be newer than controller c1 (API \
             server v1.34.4)"
        ),
        "{description}"
    );
}

#[test]
fn a_new_run_asks_every_controllers_api_server_for_its_version() {
    // A workers-only plan probes no controller for readiness, yet its skew is judged against
    // every API server: NewPlan names them all.
    let plan = PlanFixture::k0s_update(K34).workers(["w1"]);
    let cluster = published_v134();
    let reviewed = cluster.reviewed();
    let unprobed = std::collections::BTreeMap::new();
    let observed = crate::plan::Observed {
        readiness: &unprobed,
        removed_apis: Some(&[]),
        plan_access: &reviewed,
        ..cluster.dry_run_view()
    };
    let first = crate::plan::step(plan.view(), &observed, &policy());
    assert_eq!(first.needs.probe, ["c1", "c2"]);
    // With the answers, the pass names none.
    let probed = crate::plan::Observed { plan_access: &reviewed, ..cluster.dry_run_view() };
    assert!(crate::plan::step(plan.view(), &probed, &policy()).needs.probe.is_empty());
}

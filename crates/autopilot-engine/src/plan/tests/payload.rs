//! NewPlan's payload authentication: a download nothing would verify is refused, or runs
//! with a warning once per run when the controller allows it.

use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::PlanStateType as P;

use super::fixtures::*;
use super::support::*;
use crate::plan::UNSIGNED_PLAN_HINT;
use crate::plan::phases::reasons;
use crate::plan::{
    EventKind,
    ObjectKind::{ControlNode, Node},
    Transition,
};
use autopilot_api::keys;
use autopilot_api::v1beta2::TargetState;

fn unverified_payload_warnings(t: &Transition) -> Vec<String> {
    events(t)
        .into_iter()
        .filter(|(kind, reason, _)| {
            *kind == EventKind::Warning && *reason == reasons::UNVERIFIED_PAYLOAD
        })
        .map(|(_, _, note)| note)
        .collect()
}

#[test]
fn an_http_payload_without_sha256_is_refused_before_any_node_is_signalled() {
    let mut sim = one_worker_downloading(PLAIN_URL, None);
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "no node is signalled: {t:#?}");
    assert_eq!(sim.plan.state(), P::Warning);
    assert_eq!(sim.plan.command(0).state, P::Warning);
    assert_eq!(
        sim.plan.command(0).description.as_deref(),
        Some(
            "command 0 (airgapupdate): platform linux-amd64 \
             (http://files.internal/k0s-linux-amd64) has no sha256 and is not https, so \
             nothing would check what the nodes download; give its sha256, serve it over \
             https, or run the controller with --allow-unverified-payloads"
        )
    );
    assert!(unverified_payload_warnings(&t).is_empty(), "a refused plan downloads nothing");
    let state_change = events(&t)
        .into_iter()
        .find(|(_, reason, _)| *reason == reasons::PLAN_STATE_CHANGED)
        .expect("a plan state event");
    assert_eq!(state_change.0, EventKind::Warning);
    assert!(state_change.2.contains("--allow-unverified-payloads"), "{}", state_change.2);

    // Terminal: nothing more happens on the same spec.
    let t = sim.pass();
    assert!(t.effects.is_empty());
}

#[test]
fn an_empty_sha256_counts_as_none() {
    let mut sim = one_worker_downloading(PLAIN_URL, Some(""));
    let t = sim.pass();
    assert!(signalled(&t).is_empty());
    assert_eq!(sim.plan.state(), P::Warning);
}

#[test]
fn every_platform_entry_is_checked_even_one_no_target_needs() {
    // w1 is linux-amd64 with a verified payload; the arm64 entry has no node at all.
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V).workers(["w1"]).payload(
            "linux-arm64",
            "http://files.internal/bundle-arm64",
            None,
        ),
        ClusterFixture::new().workers(["w1"]),
    );
    let t = sim.pass();
    assert!(signalled(&t).is_empty());
    assert_eq!(sim.plan.state(), P::Warning);
    let description = sim.plan.command(0).description.clone().unwrap_or_default();
    assert!(description.contains("platform linux-arm64"), "{description}");
    assert!(description.contains("http://files.internal/bundle-arm64"), "{description}");
}

#[test]
fn several_refused_entries_are_named_together_and_later_commands_wait() {
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V)
            .workers(["w1"])
            .then_k0s_update(V)
            .workers(["w1"])
            .payload("linux-amd64", "http://a/k0s", None)
            .payload("linux-arm64", "http://b/k0s", Some("")),
        ClusterFixture::new().workers(["w1"]),
    );
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "command 0 was fine, but the plan never started");
    assert_eq!(sim.plan.state(), P::Warning);
    assert_eq!(sim.plan.command(0).state, P::SchedulableWait);
    assert_eq!(sim.plan.command(1).state, P::Warning);
    let description = sim.plan.command(1).description.clone().unwrap_or_default();
    assert!(
        description.starts_with(
            "command 1 (k0supdate): platform linux-amd64 (http://a/k0s), platform linux-arm64 \
             (http://b/k0s) have no sha256 and are not https"
        ),
        "{description}"
    );
    assert!(description.contains("give their sha256, serve them over https"), "{description}");
}

#[test]
fn an_http_payload_without_sha256_runs_when_the_controller_allows_it_with_a_warning() {
    let mut sim =
        one_worker_downloading(PLAIN_URL, None).with_policy(|p| p.allow_unverified_payloads = true);
    let t = sim.pass();
    assert_eq!(signalled(&t), [(Node, "w1".to_owned())]);
    assert_eq!(sim.plan.state(), P::SchedulableWait);
    assert_eq!(
        unverified_payload_warnings(&t),
        ["command 0 (airgapupdate): platform linux-amd64 \
          (http://files.internal/k0s-linux-amd64) has no sha256: it is downloaded over plain \
          http (allowed by --allow-unverified-payloads) without an integrity check; give its \
          sha256 to have every node verify it"]
    );
    let update = signal_to(&t, "w1").command.airgapupdate.clone().expect("airgap");
    assert_eq!((update.url.as_str(), update.sha256.as_str()), (PLAIN_URL, ""));
}

#[test]
fn an_https_payload_without_sha256_runs_with_one_warning_per_run() {
    let url = "https://files.internal/bundle-amd64";
    let mut sim = one_worker_downloading(url, None);
    let t = sim.pass();
    assert_eq!(signalled(&t), [(Node, "w1".to_owned())]);
    let warnings = unverified_payload_warnings(&t);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].starts_with("command 0 (airgapupdate): platform linux-amd64"));
    assert!(warnings[0].contains(url), "{}", warnings[0]);
    assert!(warnings[0].contains("without an integrity check"), "{}", warnings[0]);
    assert_eq!(
        event_reasons(&t)[..2],
        [reasons::PLAN_STARTED, reasons::UNVERIFIED_PAYLOAD],
        "announced right after the run starts"
    );

    // Later passes of the same run say nothing more about it.
    let t = sim.pass();
    assert!(unverified_payload_warnings(&t).is_empty());
    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Completed));
    let t = sim.pass();
    assert_eq!(sim.plan.state(), P::Completed);
    assert!(unverified_payload_warnings(&t).is_empty());

    // A new run warns again.
    sim.plan(|p| p.edited(|spec| spec.timestamp = "again".to_owned()));
    let t = sim.pass();
    assert_eq!(unverified_payload_warnings(&t).len(), 1);
}

#[test]
fn a_plan_refused_for_another_reason_gives_no_payload_warning() {
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V).workers(["w1", "w9"]).payload(
            "linux-amd64",
            "https://files.internal/bundle",
            None,
        ),
        ClusterFixture::new().workers(["w1"]),
    );
    let t = sim.pass();
    assert_eq!(sim.plan.state(), P::IncompleteTargets);
    assert!(unverified_payload_warnings(&t).is_empty());
}

#[test]
fn verified_payloads_need_no_warning_whatever_the_scheme() {
    let mut sim = one_worker_downloading(PLAIN_URL, Some(&sha('b')));
    let t = sim.pass();
    assert_eq!(signalled(&t), [(Node, "w1".to_owned())]);
    assert!(unverified_payload_warnings(&t).is_empty());
}

#[test]
fn a_signal_over_the_annotation_budget_is_never_written_and_the_node_fails_with_why() {
    let sha = "a".repeat(64);
    let url =
        format!("https://files.internal/{}", "k".repeat(autopilot_api::signal::MAX_SIGNAL_BYTES));
    let mut sim = one_worker_downloading(&url, Some(&sha));
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "no signal is written: {t:#?}");
    let target = sim.plan.target(0, "w1");
    assert_eq!(target.state, autopilot_api::v1beta2::TargetState::SignalApplyFailed);
    let reason = target.reason.clone().unwrap_or_default();
    assert!(reason.starts_with("refused: its signal would be "), "{reason}");
    assert!(reason.contains("over the 16384-byte budget"), "{reason}");
    assert_eq!(sim.plan.state(), P::ApplyFailed, "the plan ends instead of retrying");
}

/// The amd64 entry of the first command, to give it a signature.
fn amd64(
    spec: &mut autopilot_api::v1beta2::PlanSpec,
) -> &mut autopilot_api::v1beta2::PlanResourceUrl {
    let command = &mut spec.commands[0];
    let platforms = match (command.k0supdate.as_mut(), command.airgapupdate.as_mut()) {
        (Some(k0s), _) => &mut k0s.platforms,
        (None, Some(airgap)) => &mut airgap.platforms,
        (None, None) => panic!("an update command"),
    };
    platforms.get_mut("linux-amd64").expect("an amd64 entry")
}

/// The reason NewPlan gives a worker `name` requiring `keys` the payload lacks a signature for.
fn own_keys_reason(name: &str, keys: &str, annotation: &str) -> String {
    format!(
        "not signalled: Node {name} requires a signature by key {keys} and \
         platforms.linux-amd64 has none; only this node fails, as the keys are its own report \
         ({annotation}): give platforms.linux-amd64 a signature or signatureURL, or remove the \
         keys from the node's --payload-keys{UNSIGNED_PLAN_HINT}"
    )
}

#[test]
fn a_worker_requiring_a_key_the_plan_has_no_signature_for_fails_alone_and_the_others_update() {
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).controllers(["c1"]).workers(["w1", "w2", "w3"]).max_failures(1),
        ClusterFixture::new()
            .controllers(["c1"])
            .workers(["w1", "w2", "w3"])
            .requiring_keys("w2", &["k-one", "k-two"], &[])
            .requiring_keys("c1", &[], &["k-bundle"]),
    );
    let t = sim.pass();
    assert_eq!(sim.plan.state(), P::SchedulableWait, "the plan runs");
    assert_eq!(names(signalled(&t)), ["c1"], "c1 requires keys on bundles only");
    let w2 = sim.plan.target(0, "w2");
    assert_eq!(w2.state, TargetState::SignalApplyFailed);
    assert_eq!(
        w2.reason.as_deref(),
        Some(own_keys_reason("w2", "k-one or k-two", keys::ANNOTATION_PAYLOAD_KEYS).as_str())
    );
    assert!(
        events(&t).iter().any(|(kind, reason, note)| *kind == EventKind::Warning
            && *reason == reasons::NODE_FAILED
            && note.contains("Node w2 failed: not signalled: Node w2 requires")),
        "an Event names the node: {:#?}",
        events(&t)
    );
    sim.cluster(|c| c.reports(ControlNode, "c1", SignalPhase::Completed));
    assert_eq!(names(signalled(&sim.pass())), ["w1"], "w2 is never signalled");
    sim.cluster(|c| c.reports(Node, "w1", SignalPhase::Completed));
    assert_eq!(names(signalled(&sim.pass())), ["w3"]);
    sim.cluster(|c| c.reports(Node, "w3", SignalPhase::Completed));
    sim.pass();
    assert_eq!(sim.plan.state(), P::Completed);
    let description = sim.plan.command(0).description.clone().unwrap_or_default();
    assert!(
        description.contains("completed with 1 failed worker(s), within limits.maxFailures 1"),
        "{description}"
    );
    assert!(description.contains("Node w2 (SignalApplyFailed): not signalled"), "{description}");
}

#[test]
fn a_worker_requiring_a_key_counts_against_max_failures_like_any_failure() {
    // maxFailures 0 (the default): the one failure ends the command before any node is
    // signalled, naming the node and the key.
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).workers(["w1", "w2"]),
        ClusterFixture::new().workers(["w1", "w2"]).requiring_keys("w2", &["k-one"], &[]),
    );
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "no node is signalled: {t:#?}");
    assert_eq!(sim.plan.state(), P::ApplyFailed);
    assert_eq!(sim.plan.target_state(0, "w1"), TargetState::SignalPending, "w1 untouched");
    let description = sim.plan.command(0).description.clone().unwrap_or_default();
    assert!(
        description.ends_with(&format!(
            "Node w2: {}",
            own_keys_reason("w2", "k-one", keys::ANNOTATION_PAYLOAD_KEYS)
        )),
        "{description}"
    );
}

#[test]
fn a_worker_refused_for_its_own_keys_is_no_canary() {
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V).workers(["w1", "w2", "w3"]).max_failures(1).canary(1, None),
        ClusterFixture::new().workers(["w1", "w2", "w3"]).requiring_keys("w1", &[], &["k-b"]),
    );
    let t = sim.pass();
    assert_eq!(sim.plan.target_state(0, "w1"), TargetState::SignalApplyFailed);
    assert_eq!(names(signalled(&t)), ["w2"], "the first worker that can go is the canary");
    assert_eq!(sim.plan.state(), P::SchedulableWait, "a failed w1 does not stop the canary");
}

#[test]
fn a_controller_requiring_a_key_the_plan_has_no_signature_for_still_refuses_the_plan() {
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).controllers(["c1"]).workers(["w1"]).max_failures(1),
        ClusterFixture::new().controllers(["c1"]).workers(["w1"]).requiring_keys(
            "c1",
            &["k-one"],
            &[],
        ),
    );
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "no node is signalled: {t:#?}");
    assert_eq!(sim.plan.state(), P::Warning);
    assert_eq!(
        sim.plan.command(0).description.as_deref(),
        Some(
            format!(
                "command 0 (k0supdate): ControlNode c1 requires a signature by key k-one and \
                 platforms.linux-amd64 has none; give each such platform a signature or \
                 signatureURL (or remove the keys from the nodes' --payload-keys)\
                 {UNSIGNED_PLAN_HINT}"
            )
            .as_str()
        ),
    );
}

#[test]
fn a_signature_or_a_signature_url_satisfies_a_node_requiring_keys() {
    for signed in [
        |e: &mut autopilot_api::v1beta2::PlanResourceUrl| e.signature = Some("c2ln".into()),
        |e: &mut autopilot_api::v1beta2::PlanResourceUrl| {
            e.signature_url = Some("https://x/k0s.sig".into());
        },
    ] {
        let mut sim = Sim::new(
            PlanFixture::k0s_update(V).workers(["w1"]).edited(|spec| signed(amd64(spec))),
            ClusterFixture::new().workers(["w1"]).requiring_keys("w1", &["k-one"], &[]),
        );
        let t = sim.pass();
        assert_eq!(signalled(&t).len(), 1, "w1 is signalled: {t:#?}");
    }
}

#[test]
fn an_airgap_bundle_needs_a_signature_only_for_nodes_requiring_bundle_keys() {
    let mut sim = Sim::new(
        PlanFixture::airgap_update(V).workers(["w1"]),
        ClusterFixture::new().workers(["w1"]).requiring_keys("w1", &["k-one"], &[]),
    );
    let t = sim.pass();
    assert_eq!(signalled(&t).len(), 1, "payload keys do not apply to bundles: {t:#?}");

    let mut sim = Sim::new(
        PlanFixture::airgap_update(V).workers(["w1"]),
        ClusterFixture::new().workers(["w1"]).requiring_keys("w1", &[], &["k-bundle"]),
    );
    sim.pass();
    assert_eq!(sim.plan.state(), P::ApplyFailed, "w1 fails, past maxFailures 0");
    assert_eq!(
        sim.plan.target(0, "w1").reason.as_deref(),
        Some(own_keys_reason("w1", "k-bundle", keys::ANNOTATION_BUNDLE_KEYS).as_str())
    );
}

#[test]
fn a_platform_with_both_a_signature_and_a_signature_url_is_refused() {
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).workers(["w1"]).edited(|spec| {
            let entry = amd64(spec);
            entry.signature = Some("c2ln".into());
            entry.signature_url = Some("https://x/k0s.sig".into());
        }),
        ClusterFixture::new().workers(["w1"]),
    );
    sim.pass();
    assert_eq!(sim.plan.state(), P::Warning);
    let description = sim.plan.command(0).description.clone().unwrap_or_default();
    assert!(
        description.contains("platforms.linux-amd64: give signature or signatureURL, not both"),
        "{description}"
    );
}

fn names(signals: Vec<(crate::plan::ObjectKind, String)>) -> Vec<String> {
    signals.into_iter().map(|(_, name)| name).collect()
}

#[test]
fn the_pointer_to_the_cluster_api_docs_comes_only_when_no_platform_is_signed() {
    // w1 runs on arm64, whose entry has no signature, while the amd64 entry has one: the
    // Plan is not of the unsigned shape, so only the usual fixes are named.
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V)
            .workers(["w1"])
            .payload("linux-arm64", "https://files.internal/k0s-arm64", None)
            .edited(|spec| amd64(spec).signature = Some("c2ln".into())),
        ClusterFixture::new().workers(["w1"]).platform("w1", "linux", "arm64").requiring_keys(
            "w1",
            &["k-one"],
            &[],
        ),
    );
    sim.pass();
    let reason = sim.plan.target(0, "w1").reason.clone().unwrap_or_default();
    assert!(reason.ends_with("remove the keys from the node's --payload-keys"), "{reason}");
    assert!(!reason.contains("k0smotron"), "{reason}");
}

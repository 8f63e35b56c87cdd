//! Windows on a plan (DESIGN §4, `super::super::window`): nodes are signalled only inside
//! their window, re-checked before every batch; nodes in flight finish; per-group windows
//! through the node label, frozen when the run starts.

use std::time::Duration;

use autopilot_api::keys;
use autopilot_api::signal::SignalPhase;
use autopilot_api::v1beta2::{
    PlanSpec, PlanStateType as P, PlanWindow, TargetState, TimeRange, WeeklyRange,
};

use super::fixtures::*;
use crate::plan::phases::reasons;
use crate::plan::{ObjectKind::ControlNode, ObjectKind::Node, Requeue};

const V: &str = "v1.31.1+k0s.0";

fn minutes(n: u64) -> Duration {
    Duration::from_secs(60 * n)
}

/// An absolute window from `START + from` to `START + to` minutes.
fn range(from: i64, to: i64) -> PlanWindow {
    let at = |minutes: i64| {
        let at = start() + jiff::SignedDuration::from_mins(minutes);
        autopilot_api::signal::format_timestamp(at)
    };
    PlanWindow { ranges: vec![TimeRange { start: at(from), end: at(to) }], ..PlanWindow::default() }
}

fn windowed(edit: impl FnOnce(&mut PlanSpec)) -> Sim {
    let names = ["w1", "w2", "w3"];
    let mut plan = PlanFixture::k0s_update(V).workers(names).concurrent(1);
    edit(&mut plan.spec);
    Sim::new(plan, ClusterFixture::new().workers(names))
}

fn reason(sim: &Sim) -> String {
    sim.plan.command(0).reason.clone().unwrap_or_default()
}

fn names(t: &crate::plan::Transition) -> Vec<String> {
    signalled(t).into_iter().map(|(_, name)| name).collect()
}

#[test]
fn no_node_is_signalled_before_the_window_opens_and_the_pass_comes_back_when_it_does() {
    let mut sim = windowed(|spec| spec.window = Some(range(10, 20)));
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "{t:#?}");
    assert_eq!(sim.plan.state(), P::SchedulableWait);
    assert_eq!(reason(&sim), "waiting for the window (opens 2024-05-01T12:10:00Z)");
    assert!(event_reasons(&t).contains(&reasons::WAITING_FOR_WINDOW), "{t:#?}");
    assert_eq!(t.requeue, Requeue::After(minutes(10)));

    sim.cluster(|c| c.later(minutes(10)));
    let t = sim.pass();
    assert_eq!(names(&t), ["w1"], "open at its start (inclusive)");
    assert_eq!(sim.plan.command(0).reason, None);
}

#[test]
fn a_window_closing_mid_plan_holds_new_nodes_while_the_node_in_flight_finishes() {
    let mut sim = windowed(|spec| {
        let mut window = range(0, 10);
        window.ranges.extend(range(30, 40).ranges);
        spec.window = Some(window);
    });
    assert_eq!(names(&sim.pass()), ["w1"]);
    // The window closes while w1 works; w1 finishes, nobody follows it.
    sim.cluster(|c| c.later(minutes(10)).reports(Node, "w1", SignalPhase::Completed));
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "{t:#?}");
    assert_eq!(sim.plan.target_state(0, "w1"), TargetState::SignalCompleted);
    assert_eq!(reason(&sim), "waiting for the window (opens 2024-05-01T12:30:00Z)");
    assert_eq!(t.requeue, Requeue::After(minutes(20)));
    // It opens again: the next node goes.
    sim.cluster(|c| c.later(minutes(20)));
    assert_eq!(names(&sim.pass()), ["w2"]);
}

#[test]
fn a_window_that_never_opens_again_says_so() {
    let mut sim = windowed(|spec| spec.window = Some(range(-20, -10)));
    let t = sim.pass();
    assert!(signalled(&t).is_empty());
    assert_eq!(reason(&sim), "waiting for the window, which never opens again");
    assert_eq!(t.requeue, Requeue::OnChange, "nothing to wake up for");
}

#[test]
fn weekly_ranges_are_read_in_the_window_time_zone() {
    // START is Wednesday 12:00 UTC: Wednesday 21:00 in Tokyo.
    let tokyo = |tz: Option<&str>| PlanWindow {
        time_zone: tz.map(Into::into),
        weekly: vec![WeeklyRange {
            days: vec!["Wednesday".into()],
            start_time: "20:30".into(),
            length: "1h".into(),
        }],
        ..PlanWindow::default()
    };
    let mut sim = windowed(|spec| spec.window = Some(tokyo(Some("Asia/Tokyo"))));
    assert_eq!(names(&sim.pass()), ["w1"]);

    let mut sim = windowed(|spec| spec.window = Some(tokyo(None)));
    assert!(signalled(&sim.pass()).is_empty());
    assert_eq!(reason(&sim), "waiting for the window (opens 2024-05-01T20:30:00Z)");
}

#[test]
fn without_pre_staging_the_download_window_must_be_open_too() {
    let mut sim = windowed(|spec| {
        spec.window = Some(range(0, 60));
        spec.download_window = Some(range(5, 60));
    });
    assert!(signalled(&sim.pass()).is_empty());
    assert_eq!(reason(&sim), "waiting for the download window (opens 2024-05-01T12:05:00Z)");
    sim.cluster(|c| c.later(minutes(5)));
    assert_eq!(names(&sim.pass()), ["w1"]);
}

#[test]
fn a_labelled_node_goes_inside_its_named_window_frozen_when_the_run_starts() {
    let names3 = ["w1", "w2", "w3"];
    let mut plan = PlanFixture::k0s_update(V).workers(names3).concurrent(3);
    plan.spec.windows.insert("rack-a".into(), range(0, 60));
    plan.spec.windows.insert("rack-b".into(), range(30, 60));
    let cluster = ClusterFixture::new()
        .workers(names3)
        .label("w1", keys::LABEL_WINDOW, "rack-a")
        .label("w2", keys::LABEL_WINDOW, "rack-b");
    let mut sim = Sim::new(plan, cluster);
    let t = sim.pass();
    assert_eq!(names(&t), ["w1", "w3"], "w3 has no label and the plan no window");
    let frozen = sim.plan.status().windows.clone().unwrap();
    assert_eq!(frozen.members["rack-a"].workers, ["w1"]);
    assert_eq!(frozen.members["rack-b"].workers, ["w2"]);

    // w2 moves itself into the open window mid-run: the run keeps what it read at its start.
    sim.cluster(|c| {
        c.label("w2", keys::LABEL_WINDOW, "rack-a")
            .reports(Node, "w1", SignalPhase::Completed)
            .reports(Node, "w3", SignalPhase::Completed)
    });
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "{t:#?}");
    assert_eq!(reason(&sim), "waiting for window rack-b (opens 2024-05-01T12:30:00Z)");
    sim.cluster(|c| c.later(minutes(30)));
    assert_eq!(names(&sim.pass()), ["w2"]);
}

#[test]
fn a_label_naming_no_window_keeps_the_plan_window_with_a_warning() {
    let names3 = ["w1", "w2", "w3"];
    let mut plan = PlanFixture::k0s_update(V).workers(names3).concurrent(3);
    plan.spec.window = Some(range(0, 60));
    plan.spec.windows.insert("rack-a".into(), range(30, 60));
    let cluster = ClusterFixture::new().workers(names3).label("w2", keys::LABEL_WINDOW, "rack-z");
    let mut sim = Sim::new(plan, cluster);
    let t = sim.pass();
    assert_eq!(names(&t), ["w1", "w2", "w3"]);
    let warning = events(&t)
        .into_iter()
        .find(|(_, reason, _)| *reason == reasons::UNKNOWN_WINDOW)
        .expect("a warning Event");
    assert!(warning.2.contains("Node w2 (\"rack-z\")"), "{}", warning.2);
}

#[test]
fn controllers_wait_for_their_window_too() {
    let mut plan = PlanFixture::k0s_update(V).controllers(["c1"]).workers(["w1"]);
    plan.spec.window = Some(range(5, 60));
    let mut sim = Sim::new(plan, ClusterFixture::new().controllers(["c1"]).workers(["w1"]));
    let t = sim.pass();
    assert!(signalled(&t).is_empty(), "{t:#?}");
    assert_eq!(reason(&sim), "waiting for the window (opens 2024-05-01T12:05:00Z)");
    sim.cluster(|c| c.later(minutes(5)));
    assert_eq!(signalled(&sim.pass()), [(ControlNode, "c1".to_owned())]);
}

#[test]
fn a_window_that_does_not_compile_refuses_the_run_naming_the_field() {
    let mut sim = windowed(|spec| {
        spec.window = Some(PlanWindow { time_zone: Some("Mars/Olympus".into()), ..range(0, 10) })
    });
    let t = sim.pass();
    assert!(signalled(&t).is_empty());
    assert_eq!(sim.plan.state(), P::Warning);
    let description = sim.plan.command(0).description.clone().unwrap_or_default();
    assert!(
        description.starts_with("spec.window.timeZone: unknown time zone \"Mars/Olympus\""),
        "{description}"
    );
    let mut sim = windowed(|spec| {
        spec.windows.insert("empty".into(), PlanWindow::default());
    });
    sim.pass();
    assert_eq!(sim.plan.state(), P::Warning);
    assert_eq!(
        sim.plan.command(0).description.as_deref(),
        Some("spec.windows.empty: neither weekly nor ranges is set; the window would never open")
    );
}

#[test]
fn a_dry_run_waits_for_the_window_and_shows_how_long() {
    let names3 = ["w1", "w2", "w3"];
    let mut plan = PlanFixture::k0s_update(V).workers(names3).concurrent(2);
    // One second at 12:10, then an hour later.
    let mut window = range(70, 80);
    window.ranges.push(TimeRange {
        start: "2024-05-01T12:10:00Z".into(),
        end: "2024-05-01T12:10:01Z".into(),
    });
    plan.spec.window = Some(window);
    let cluster = ClusterFixture::new().workers(names3);
    let dry = crate::plan::rollout::rollout(plan.view().spec, &cluster.dry_run_view(), &policy());
    let waited: Vec<Option<Duration>> = dry.batches.iter().map(|b| b.waited).collect();
    assert_eq!(dry.end.state, P::Completed, "{:#?}", dry.end);
    assert_eq!(dry.batches.len(), 2);
    // The dry run's first pass (NewPlan) takes a second of its clock.
    assert!(
        waited[0].is_some_and(|w| w > minutes(9) && w <= minutes(10)),
        "the first batch waits for the window: {waited:?}"
    );
    assert!(
        waited[1].is_some_and(|w| w >= minutes(58)),
        "the second for its next range: {waited:?}"
    );
}

#[test]
fn pre_staging_waits_for_the_download_window_and_staged_nodes_need_only_their_window() {
    use autopilot_api::prestage::PrestageOutcome;
    let mut plan = PlanFixture::k0s_update(V).workers(["w1", "w2"]).concurrent(2);
    let update = plan.spec.commands[0].k0supdate.as_mut().expect("k0supdate");
    update.rollout.prestage = true;
    // Downloads from 12:05 to 12:10; updates any time from 12:00 to 13:00.
    plan.spec.download_window = Some(range(5, 10));
    plan.spec.window = Some(range(0, 60));
    let mut sim = Sim::new(plan, ClusterFixture::new().workers(["w1", "w2"]));
    let asked = |t: &crate::plan::Transition| {
        t.effects.iter().filter(|e| matches!(e, crate::plan::Effect::Prestage { .. })).count()
    };
    let t = sim.pass();
    assert_eq!(asked(&t), 0, "no staging before the download window: {t:#?}");
    assert!(signalled(&t).is_empty());
    assert!(
        reason(&sim).ends_with(
            "asking no further node: waiting for the download window (opens \
             2024-05-01T12:05:00Z)"
        ),
        "{}",
        reason(&sim)
    );
    assert_eq!(t.requeue, Requeue::After(minutes(5)));

    sim.cluster(|c| c.later(minutes(5)));
    assert_eq!(asked(&sim.pass()), 2, "both asked once it opens");
    // They stage; the download window closes before the update: the staged nodes go anyway.
    sim.cluster(|c| {
        c.later(minutes(10))
            .reports_staged(Node, "w1", PrestageOutcome::Staged, None)
            .reports_staged(Node, "w2", PrestageOutcome::Staged, None)
    });
    assert_eq!(names(&sim.pass()), ["w1", "w2"]);
}

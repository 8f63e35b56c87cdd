//! NewPlan's refusals of commands no node or scheduler could act on: a command of both or
//! neither kind, and fields the schema lets through (soak, canary, limits on controllers,
//! URLs, versions), each named by its path before any node is signalled.

use autopilot_api::v1beta2::{PlanCommand, PlanStateType as P};

use super::fixtures::*;
use super::support::*;

#[test]
fn a_command_with_both_or_neither_kind_ends_in_warning() {
    let both = PlanCommand {
        k0supdate: PlanFixture::k0s_update(V).spec.commands[0].k0supdate.clone(),
        airgapupdate: PlanFixture::airgap_update(V).spec.commands[0].airgapupdate.clone(),
        preflight: None,
    };
    let mut sim =
        Sim::new(PlanFixture::without_commands().then_command(both), ClusterFixture::new());
    sim.pass();
    assert_eq!(sim.plan.state(), P::Warning);
    assert_eq!(
        sim.plan.command(0).description.as_deref(),
        Some("command 0 sets both k0supdate and airgapupdate; exactly one is required")
    );

    let mut sim = Sim::new(
        PlanFixture::airgap_update(V).then_command(PlanCommand::default()),
        ClusterFixture::new(),
    );
    sim.pass();
    assert_eq!(sim.plan.state(), P::Warning);
    assert_eq!(sim.plan.command(0).state, P::SchedulableWait);
    assert_eq!(sim.plan.command(1).state, P::Warning);
    assert_eq!(
        sim.plan.command(1).description.as_deref(),
        Some("command 1 sets neither k0supdate nor airgapupdate; exactly one is required")
    );
}

#[test]
fn a_plan_without_an_id_ends_in_warning_and_signals_nobody() {
    for id in ["", "  "] {
        let mut sim = k0s_plan_with(|spec| spec.id = id.to_owned());
        let passed = sim.pass();
        assert_eq!(sim.plan.state(), P::Warning, "id {id:?}");
        assert_eq!(
            sim.plan.command(0).description.as_deref(),
            Some(crate::plan::driver::discovery::EMPTY_PLAN_ID),
            "id {id:?}"
        );
        assert!(signalled(&passed).is_empty(), "id {id:?}: {:?}", signalled(&passed));
    }
}

/// A one-command plan (`k0supdate` of controller c1 and workers w1, w2) on a cluster that
/// has them, with `edit` applied to the spec.
fn k0s_plan_with(edit: impl FnOnce(&mut autopilot_api::PlanSpec)) -> Sim {
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).controllers(["c1"]).workers(["w1", "w2"]),
        ClusterFixture::new().controllers(["c1"]).workers(["w1", "w2"]),
    );
    sim.plan(|p| p.edited(edit));
    sim
}

fn k0s_limits<'a>(
    spec: &'a mut autopilot_api::PlanSpec,
    group: &str,
) -> &'a mut autopilot_api::v1beta2::PlanCommandTargetLimits {
    let targets = &mut spec.commands[0].k0supdate.as_mut().expect("k0s").targets;
    let target = match group {
        "controllers" => targets.controllers.as_mut(),
        "workers" => targets.workers.as_mut(),
        other => panic!("no group {other}"),
    };
    &mut target.expect("the group is targeted").limits
}

/// Runs a few passes and asserts the plan ended `Warning` in the first one, with no node
/// ever signalled; returns the command's description.
fn refused_up_front(sim: &mut Sim, command: usize) -> String {
    for _ in 0..3 {
        let transition = sim.pass();
        assert!(signalled(&transition).is_empty(), "{transition:?}");
        assert_eq!(sim.plan.state(), P::Warning);
        assert_eq!(sim.plan.command(command).state, P::Warning);
    }
    sim.plan.command(command).description.clone().expect("a description")
}

#[test]
fn a_soak_that_is_not_a_duration_is_refused_naming_the_field() {
    let mut sim = k0s_plan_with(|spec| {
        let limits = k0s_limits(spec, "workers");
        limits.canary = Some(1);
        limits.soak = Some("soon".to_owned());
    });
    assert_eq!(
        refused_up_front(&mut sim, 0),
        "commands[0].k0supdate.targets.workers.limits.soak: \"soon\" is not a duration (e.g. \
         30s, 5m, 1h30m)"
    );
}

#[test]
fn a_soak_without_a_canary_is_refused_naming_both_fields() {
    let mut sim = k0s_plan_with(|spec| k0s_limits(spec, "workers").soak = Some("10m".into()));
    let description = refused_up_front(&mut sim, 0);
    assert!(
        description.starts_with(
            "commands[0].k0supdate.targets.workers.limits.soak: \"10m\" is set without \
             commands[0].k0supdate.targets.workers.limits.canary"
        ),
        "{description}"
    );
}

#[test]
fn a_canary_max_failures_or_soak_on_controllers_is_refused_naming_the_field() {
    type Edit = fn(&mut autopilot_api::v1beta2::PlanCommandTargetLimits);
    let cases: [(&str, Edit); 3] = [
        ("canary", |limits| limits.canary = Some(1)),
        ("maxFailures", |limits| limits.max_failures = Some(2)),
        ("soak", |limits| limits.soak = Some("10m".into())),
    ];
    for (field, edit) in cases {
        let mut sim = k0s_plan_with(|spec| edit(k0s_limits(spec, "controllers")));
        let description = refused_up_front(&mut sim, 0);
        let path = format!("commands[0].k0supdate.targets.controllers.limits.{field}: ");
        assert!(description.starts_with(&path), "{description}");
        assert!(description.contains("not allowed on controllers"), "{description}");
    }
}

#[test]
fn limits_that_mean_the_default_on_controllers_are_accepted() {
    let mut sim = k0s_plan_with(|spec| {
        let limits = k0s_limits(spec, "controllers");
        limits.max_failures = Some(0);
        limits.concurrent = autopilot_api::v1beta2::Concurrency::Count(3);
    });
    sim.pass();
    assert_eq!(sim.plan.state(), P::SchedulableWait);
}

#[test]
fn a_canary_with_a_soak_on_workers_is_accepted() {
    let mut sim = k0s_plan_with(|spec| {
        let limits = k0s_limits(spec, "workers");
        limits.canary = Some(1);
        limits.soak = Some("1h30m".into());
        limits.max_failures = Some(1);
    });
    sim.pass();
    assert_eq!(sim.plan.state(), P::SchedulableWait);
}

#[test]
fn a_url_the_node_would_refuse_is_refused_before_any_signal_with_the_nodes_words() {
    for url in ["example.invalid/k0s", "https://files.internal:port/k0s", "http://h/k 0s"] {
        let mut sim = Sim::new(
            PlanFixture::k0s_update(V).workers(["w1"]).payload("linux-amd64", url, Some(&sha('a'))),
            ClusterFixture::new().workers(["w1"]),
        );
        let description = refused_up_front(&mut sim, 0);
        let problem = autopilot_api::payload::url_problem(url).expect("the node refuses it");
        assert_eq!(
            description,
            format!("commands[0].k0supdate.platforms.linux-amd64.url: {problem}")
        );
    }
}

#[test]
fn a_version_no_node_can_report_is_refused_naming_the_field() {
    for version in [" ", "v1.35.1 +k0s.0", "v1.35.1+k0s.0\n"] {
        let mut sim = Sim::new(
            PlanFixture::airgap_update(version).workers(["w1"]),
            ClusterFixture::new().workers(["w1"]),
        );
        let description = refused_up_front(&mut sim, 0);
        assert!(description.starts_with("commands[0].airgapupdate.version: "), "{description}");
    }
}

#[test]
fn a_version_that_could_carry_a_path_into_a_url_is_refused_naming_the_field() {
    // The CRD pattern refuses these only for Plans written after it; one stored under an
    // older, looser CRD reaches the engine, which refuses it before any node is signalled.
    for version in ["v1.36.0-a/../x+k0s.0", "v1.36.0-a?x+k0s.0", "v1.36.0-a#x+k0s.0", "v2"] {
        let mut sim = Sim::new(
            PlanFixture::k0s_update(version).workers(["w1"]),
            ClusterFixture::new().workers(["w1"]),
        );
        let description = refused_up_front(&mut sim, 0);
        assert_eq!(
            description,
            format!(
                "commands[0].k0supdate.version: {version:?} is not a k0s version: SemVer with \
                 an optional leading v and at most +k0s.N as build metadata (v1.35.1+k0s.0, \
                 v1.36.0-rc.1+k0s.0)"
            )
        );
    }
}

#[test]
fn every_field_problem_of_a_command_is_named_in_one_pass() {
    let mut sim = Sim::new(
        PlanFixture::airgap_update("v1 2").workers(["w1"]).payload(
            "linux-arm64",
            "files.internal/bundle",
            None,
        ),
        ClusterFixture::new().workers(["w1"]),
    );
    sim.plan(|p| {
        p.edited(|spec| {
            let airgap = spec.commands[0].airgapupdate.as_mut().expect("airgap");
            airgap.rollout.progress_timeout = Some("soon".into());
            airgap.workers.limits.soak = Some("forever".into());
        })
    });
    let description = refused_up_front(&mut sim, 0);
    let fields: Vec<&str> = description
        .split("; ")
        .filter_map(|problem| problem.split_once(": "))
        .map(|p| p.0)
        .collect();
    assert_eq!(
        fields,
        [
            "commands[0].airgapupdate.version",
            "commands[0].airgapupdate.platforms.linux-arm64.url",
            "commands[0].airgapupdate.progressTimeout",
            "commands[0].airgapupdate.workers.limits.soak",
            "commands[0].airgapupdate.workers.limits.soak",
        ],
        "{description}"
    );
}

#[test]
fn a_bad_field_in_a_later_command_refuses_the_plan_before_the_first_command_signals() {
    let mut sim = Sim::new(
        PlanFixture::k0s_update(V).workers(["w1"]).then_k0s_update(V).workers(["w1"]),
        ClusterFixture::new().workers(["w1"]),
    );
    sim.plan(|p| {
        p.edited(|spec| {
            let workers =
                spec.commands[1].k0supdate.as_mut().expect("k0s").targets.workers.as_mut();
            let limits = &mut workers.expect("workers").limits;
            limits.canary = Some(1);
            limits.soak = Some("soon".into());
        })
    });
    let description = refused_up_front(&mut sim, 1);
    assert!(
        description.starts_with("commands[1].k0supdate.targets.workers.limits.soak: "),
        "{description}"
    );
}

#[test]
fn drain_options_out_of_bounds_or_an_unreadable_pod_selector_refuse_the_plan_naming_the_field() {
    let mut sim =
        Sim::new(PlanFixture::k0s_update(V).workers(["w1"]), ClusterFixture::new().workers(["w1"]));
    sim.plan(|p| {
        p.edited(|spec| {
            let k0s = spec.commands[0].k0supdate.as_mut().expect("k0s");
            k0s.drain_options = Some(autopilot_api::v1beta2::DrainOptions {
                grace_period: Some(3601),
                skip_wait_for_delete_timeout: Some(0),
                pod_selector: Some("app in (web".into()),
                ..Default::default()
            });
        })
    });
    let description = refused_up_front(&mut sim, 0);
    let fields: Vec<&str> = description
        .split("; ")
        .filter_map(|problem| problem.split_once(": "))
        .map(|p| p.0)
        .collect();
    assert_eq!(
        fields,
        [
            "commands[0].k0supdate.drainOptions.gracePeriod",
            "commands[0].k0supdate.drainOptions.skipWaitForDeleteTimeout",
            "commands[0].k0supdate.drainOptions.podSelector",
        ],
        "{description}"
    );
    assert!(description.contains("3601 is more than 3600 seconds"), "{description}");
}

#[test]
fn drain_options_within_bounds_and_a_readable_pod_selector_pass() {
    let options = autopilot_api::v1beta2::DrainOptions {
        force: true,
        delete_emptydir_data: true,
        grace_period: Some(0),
        skip_wait_for_delete_timeout: Some(3600),
        pod_selector: Some("app=web,tier notin (db)".into()),
    };
    let problems = crate::plan::driver::discovery::drain_options_problems("drainOptions", &options);
    assert!(problems.is_empty(), "{problems:?}");
}

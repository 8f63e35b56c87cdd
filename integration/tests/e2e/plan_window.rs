//! Windows on a plan, on the real control plane with a real controller and real worker
//! agents. A plan of two workers (one at a time) has a window of two absolute ranges: the
//! first is open when the plan starts and closes while worker-0 downloads (its payload is
//! held by the server until the range has closed), the second opens about 45 s after the
//! start. worker-0 finishes, worker-1 is held with `waiting for the window (opens …)`, and
//! is signalled only once the second range opened; the plan completes. Then a weekly window
//! written for Asia/Tokyo's wall clock: read as UTC (no `timeZone`) it is closed and the
//! reason names when it would open in UTC; with `timeZone: Asia/Tokyo` the same range is
//! open and the node is updated.

use std::time::Duration;

use autopilot_api::signal::format_timestamp;
use autopilot_api::v1beta2::{
    Plan, PlanStateType, PlanWindow, TargetState, TimeRange, WeeklyRange,
};
use integration::http::{FileServer, Serve};
use integration::signals::{ObjectKind, SignalRecorder};
use integration::wait_for;
use jiff::{SignedDuration, Timestamp};

use crate::support::*;

const WORKERS: [&str; 2] = ["worker-0", "worker-1"];

/// A plan of `workers` (one at a time) to v2 from `server`, inside `window`.
fn windowed(
    id: &str,
    server: &FileServer,
    sha: &str,
    workers: &[&str],
    window: PlanWindow,
) -> Plan {
    let mut update = update_to(V2, server.base_url(), sha, None, Some(static_nodes(workers, 1)));
    update.forceupdate = true;
    let mut plan = plan("autopilot", id, vec![k0s_command(update)]);
    plan.spec.window = Some(window);
    plan
}

fn range(start: Timestamp, end: Timestamp) -> TimeRange {
    TimeRange { start: format_timestamp(start), end: format_timestamp(end) }
}

/// The command's reason, once it is `reason`.
async fn wait_reason(client: &kube::Client, reason: &str) -> Plan {
    wait_plan(client, "autopilot", PLAN_TIMEOUT, reason, |p| {
        p.status.as_ref().and_then(|s| s.commands.first()).and_then(|c| c.reason.as_deref())
            == Some(reason)
    })
    .await
    .expect("the command's reason")
}

#[tokio::test]
async fn a_window_closing_mid_plan_holds_new_nodes_opening_resumes_and_time_zones_count() {
    let (v2, sha) = v2_build();
    let server = FileServer::start_with(Serve::HoldUntilReleased { body: v2, after: 1 << 20 })
        .await
        .unwrap();
    let Fleet { cluster: _cluster, client, controllers: _controllers, workers: _workers } =
        FleetBuilder::new("plan-window")
            .controllers(1)
            .workers(&WORKERS)
            .agents(Agents::Real)
            .start()
            .await
            .unwrap();
    let recorder = SignalRecorder::start(&client).await.unwrap();

    // Whole seconds: the window's bounds are written as RFC 3339 seconds.
    let now = Timestamp::from_second(Timestamp::now().as_second()).unwrap();
    let first_closes = now + SignedDuration::from_secs(12);
    let second_opens = now + SignedDuration::from_secs(45);
    let window = PlanWindow {
        ranges: vec![
            range(now - SignedDuration::from_secs(60), first_closes),
            range(second_opens, now + SignedDuration::from_mins(10)),
        ],
        ..PlanWindow::default()
    };
    create_plan(&client, &windowed("window", &server, &sha, &WORKERS, window)).await.unwrap();

    // worker-0 is signalled inside the first range and downloads; the range closes.
    server.wait_held(1, PLAN_TIMEOUT).await.unwrap();
    wait_for(Duration::from_secs(30), "the first range to close", || async {
        Ok((Timestamp::now() >= first_closes).then_some(()))
    })
    .await
    .unwrap();
    server.release();

    // worker-0 finishes; worker-1 waits for the second range.
    let expected = format!("waiting for the window (opens {})", format_timestamp(second_opens));
    let held = wait_reason(&client, &expected).await;
    assert_eq!(target(&held, 0, "worker-0").state, TargetState::SignalCompleted);
    assert_eq!(
        target(&held, 0, "worker-1").state,
        TargetState::SignalPending,
        "{}",
        status_yaml(&held)
    );
    let done = wait_plan(&client, "autopilot", PLAN_TIMEOUT, "Completed", |p| {
        state(p) == PlanStateType::Completed
    })
    .await
    .unwrap();
    assert_eq!(target(&done, 0, "worker-1").state, TargetState::SignalCompleted);
    let signalled_at = |name: &str| -> Timestamp {
        let seen = recorder
            .history()
            .into_iter()
            .find(|s| s.object.kind == ObjectKind::Node && s.object.name == name)
            .unwrap_or_else(|| panic!("{name} was signalled"));
        seen.created.parse().unwrap()
    };
    assert!(signalled_at("worker-0") < first_closes, "worker-0 went inside the first range");
    assert!(
        signalled_at("worker-1") >= second_opens,
        "worker-1 was signalled at {}, before the second range opened at {second_opens}",
        signalled_at("worker-1")
    );
    delete_plan(&client).await;

    // A weekly range written for Tokyo's wall clock (it started a minute ago there).
    weekly_ranges_count_in_their_time_zone(&client, &server, &sha).await;
}

/// A weekly range written for Tokyo's wall clock (it started a minute ago there): read as
/// UTC it opens 9 hours later and holds the plan; in `Asia/Tokyo` it is open and the plan
/// completes.
async fn weekly_ranges_count_in_their_time_zone(
    client: &kube::Client,
    server: &FileServer,
    sha: &str,
) {
    let tokyo = Timestamp::now().in_tz("Asia/Tokyo").expect("Tokyo's time zone")
        - SignedDuration::from_mins(1);
    let weekly = |time_zone: Option<&str>| PlanWindow {
        time_zone: time_zone.map(Into::into),
        weekly: vec![WeeklyRange {
            days: vec![format!("{:?}", tokyo.weekday())],
            start_time: tokyo.strftime("%H:%M").to_string(),
            length: "1h".into(),
        }],
        ..PlanWindow::default()
    };
    // Read as UTC, the same wall clock is 9 hours later (Tokyo has no daylight saving time).
    let minute = tokyo.timestamp().as_second() / 60 * 60;
    let utc_opens =
        Timestamp::from_second(minute).expect("a timestamp") + SignedDuration::from_hours(9);
    let utc = windowed("window-utc", server, sha, &WORKERS[..1], weekly(None));
    create_plan(client, &utc).await.expect("creating the plan");
    let held = wait_reason(
        client,
        &format!("waiting for the window (opens {})", format_timestamp(utc_opens)),
    )
    .await;
    assert_eq!(target(&held, 0, "worker-0").state, TargetState::SignalPending);
    delete_plan(client).await;

    let in_tokyo = windowed("window-tokyo", server, sha, &WORKERS[..1], weekly(Some("Asia/Tokyo")));
    create_plan(client, &in_tokyo).await.expect("creating the plan");
    let done = wait_plan(client, "autopilot", PLAN_TIMEOUT, "Completed", |p| {
        state(p) == PlanStateType::Completed
    })
    .await
    .expect("the plan completes");
    assert_eq!(target(&done, 0, "worker-0").state, TargetState::SignalCompleted);
}

//! Fuzz targets of the updater's pure parts: update-server answers (index and legacy
//! YAML), upgrade strategies (windows, cron), version strings. No input panics; every
//! refusal names the field and why; nothing refused by the node's rules gets into a plan.

use autopilot_api::fuzz::{config, json, mutated, word};
use autopilot_api::payload;
use autopilot_api::v1beta2::UpgradeStrategy;
use autopilot_api::version::K0sVersion;
use autopilot_engine::updater::channel::ChannelAnswer;
use autopilot_engine::updater::cron::Schedule;
use autopilot_engine::updater::decide::Strategy as UpgradeTiming;
use proptest::prelude::*;
use serde_json::{Value, json};

/// A version string: mostly shaped like one, sometimes anything.
const VERSION: &str = "v?[0-9]{1,2}\\.[0-9]{1,2}\\.[0-9]{1,2}(-[a-z0-9.]{1,6})?(\\+k0s\\.[0-9])?";

fn index_answer() -> Value {
    json!({
        "channel": "stable",
        "version": "v1.35.2+k0s.0",
        "eolDate": "2027-01-01",
        "downloadURLs": [{
            "os": "linux", "arch": "amd64",
            "k0s": "https://127.0.0.1/k0s-v1.35.2+k0s.0-amd64",
            "k0sSha256": "ab".repeat(32),
            "airgapBundle": "https://127.0.0.1/bundle-amd64",
            "airgapSha256": "cd".repeat(32),
        }],
    })
}

fn legacy_answer() -> Value {
    json!({
        "version": "v1.35.2+k0s.0",
        "downloadURLs": {
            "k0s": { "linux-amd64": "https://127.0.0.1/k0s" },
            "airgap": { "linux-amd64": "https://127.0.0.1/bundle" },
        },
    })
}

fn strategy() -> Value {
    json!({
        "type": "periodic",
        "cron": "0 2 * * *",
        "periodic": { "days": ["Monday", "Sat"], "startTime": "02:30", "length": "1h30m" },
    })
}

/// YAML text: a document (arbitrary or a mutated answer) written as YAML, or any text.
fn yaml(valid: Value) -> impl Strategy<Value = String> {
    prop_oneof![
        3 => mutated(valid).prop_map(|v| serde_saphyr::to_string(&v).expect("JSON is YAML")),
        1 => json(3).prop_map(|v| serde_saphyr::to_string(&v).expect("JSON is YAML")),
        1 => any::<String>(),
    ]
}

/// An accepted answer holds only what a node would accept; a refusal says why.
fn check_answer(
    answer: Result<ChannelAnswer, autopilot_engine::updater::channel::Error>,
) -> Result<(), TestCaseError> {
    match answer {
        Ok(answer) => {
            prop_assert!(
                payload::version_problem(&answer.version).is_none(),
                "{:?}",
                answer.version
            );
            for (platform, resource) in answer.k0s.iter().chain(&answer.airgap) {
                prop_assert!(
                    payload::url_problem(&resource.url).is_none(),
                    "{platform}: {:?}",
                    resource.url
                );
            }
        }
        Err(err) => prop_assert!(!err.to_string().trim().is_empty()),
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn index_answers_are_accepted_only_when_usable(body in yaml(index_answer())) {
        check_answer(ChannelAnswer::from_index_yaml(&body))?;
    }

    #[test]
    fn legacy_answers_are_accepted_only_when_usable(body in yaml(legacy_answer())) {
        check_answer(ChannelAnswer::from_legacy_yaml(&body))?;
    }

    #[test]
    fn strategies_are_timed_or_refused_with_a_reason(
        doc in prop_oneof![mutated(strategy()), json(3)],
        cron in proptest::option::of(prop_oneof![
            "[0-9*/,-]{1,4}( [0-9*/,A-Za-z-]{1,5}){4,5}", word()
        ]),
        now in 0i64..4_102_444_800,
    ) {
        let Ok(mut strategy) = serde_json::from_value::<UpgradeStrategy>(doc) else {
            return Ok(());
        };
        if cron.is_some() {
            strategy.cron = cron;
        }
        match UpgradeTiming::from_spec(Some(&strategy)) {
            Ok(timed) => {
                let now = jiff::Timestamp::from_second(now).expect("in range");
                let period = std::time::Duration::from_secs(600);
                if let Some(next) = timed.next_check(now, &jiff::tz::TimeZone::UTC, period) {
                    prop_assert!(next > now, "the next check {next} is not after {now}");
                }
            }
            Err(err) => prop_assert!(!err.to_string().trim().is_empty()),
        }
    }

    #[test]
    fn cron_expressions_parse_or_say_why(expr in prop_oneof![
        "[0-9*/,-]{1,4}( [0-9*/,A-Za-z?#L-]{1,5}){4,5}", "@[a-z]{0,8}", word(), any::<String>()
    ]) {
        if let Err(err) = Schedule::parse(&expr) {
            prop_assert!(!err.to_string().trim().is_empty());
        }
    }

    #[test]
    fn versions_parse_into_a_total_order(
        a in prop_oneof![VERSION, word()],
        b in prop_oneof![VERSION, word()],
    ) {
        match (K0sVersion::parse(&a), K0sVersion::parse(&b)) {
            (Ok(a), Ok(b)) => {
                prop_assert_eq!(a.cmp(&a), std::cmp::Ordering::Equal);
                prop_assert_eq!(a.cmp(&b), b.cmp(&a).reverse());
                // What is printed parses back to the same version.
                let again = K0sVersion::parse(&a.to_string()).expect("a printed version parses");
                prop_assert_eq!(again.cmp(&a), std::cmp::Ordering::Equal);
            }
            (Err(err), _) | (_, Err(err)) => prop_assert!(!err.to_string().trim().is_empty()),
        }
    }
}

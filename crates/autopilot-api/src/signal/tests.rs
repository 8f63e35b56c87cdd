//! Golden, validation and round-trip tests for the signal envelope.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

const SHA: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn k0s_signal() -> SignalData {
    SignalData {
        plan_id: "id123".into(),
        created: "2024-05-01T12:00:00Z".into(),
        command: SignalCommand {
            rollback: None,
            preflight: None,
            id: 0,
            k0supdate: Some(CommandK0sUpdate {
                url: "https://example.com/k0s".into(),
                version: "v1.30.2+k0s.0".into(),
                sha256: SHA.into(),
                forceupdate: true,
            }),
            airgapupdate: None,
        },
        status: None,
        run_id: None,
    }
}

fn airgap_signal() -> SignalData {
    SignalData {
        plan_id: "id123".into(),
        created: "2024-05-01T12:00:00+02:00".into(),
        command: SignalCommand {
            rollback: None,
            preflight: None,
            id: 1,
            k0supdate: None,
            airgapupdate: Some(CommandAirgapUpdate {
                url: "https://example.com/bundle.tar".into(),
                version: "v1.30.2+k0s.0".into(),
                sha256: SHA.into(),
            }),
        },
        status: None,
        run_id: None,
    }
}

fn annotations(version: &str, data: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (keys::ANNOTATION_SIGNAL_VERSION.to_owned(), version.to_owned()),
        (keys::ANNOTATION_SIGNAL_DATA.to_owned(), data.to_owned()),
    ])
}

// === Golden JSON ===

#[test]
fn a_fresh_k0s_update_signal_is_pinned() {
    let (version, json) = encode(&k0s_signal());
    assert_eq!(version, "v2");
    assert_eq!(
        json,
        r#"{"planId":"id123","created":"2024-05-01T12:00:00Z","command":{"id":0,"k0supdate":{"url":"https://example.com/k0s","version":"v1.30.2+k0s.0","sha256":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","forceupdate":true}}}"#
    );
}

#[test]
fn a_k0s_update_signal_with_status_is_pinned() {
    let mut data = k0s_signal();
    data.command.k0supdate = data.command.k0supdate.map(|mut u| {
        u.sha256.clear();
        u.forceupdate = false;
        u
    });
    let data = data.with_status(SignalStatus {
        preflight: BTreeMap::new(),
        status: SignalPhase::Downloading,
        timestamp: "2024-05-01T12:00:05Z".into(),
        reason: None,
    });
    assert_eq!(
        encode(&data).1,
        r#"{"planId":"id123","created":"2024-05-01T12:00:00Z","command":{"id":0,"k0supdate":{"url":"https://example.com/k0s","version":"v1.30.2+k0s.0"}},"status":{"status":"Downloading","timestamp":"2024-05-01T12:00:05Z"}}"#
    );
}

#[test]
fn a_failed_signal_carries_our_reason_last() {
    let data = k0s_signal().with_status(
        SignalStatus::new(SignalPhase::FailedDownload, "2024-05-01T12:00:07Z".parse().expect("ts"))
            .with_reason("sha256 mismatch"),
    );
    assert!(encode(&data).1.ends_with(
        r#""status":{"status":"FailedDownload","timestamp":"2024-05-01T12:00:07Z","reason":"sha256 mismatch"}}"#
    ));
}

#[test]
fn a_fresh_airgap_update_signal_is_pinned() {
    assert_eq!(
        encode(&airgap_signal()).1,
        r#"{"planId":"id123","created":"2024-05-01T12:00:00+02:00","command":{"id":1,"airgapupdate":{"url":"https://example.com/bundle.tar","version":"v1.30.2+k0s.0","sha256":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}}}"#
    );
}

#[test]
fn an_airgap_update_signal_with_status_is_pinned() {
    let data = airgap_signal().with_status(SignalStatus {
        preflight: BTreeMap::new(),
        status: SignalPhase::Completed,
        timestamp: "2024-05-01T12:03:00+02:00".into(),
        reason: None,
    });
    assert_eq!(
        encode(&data).1,
        r#"{"planId":"id123","created":"2024-05-01T12:00:00+02:00","command":{"id":1,"airgapupdate":{"url":"https://example.com/bundle.tar","version":"v1.30.2+k0s.0","sha256":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}},"status":{"status":"Completed","timestamp":"2024-05-01T12:03:00+02:00"}}"#
    );
}

#[test]
fn every_signal_phase_serialises_to_its_k0s_string() {
    let wire: Vec<Value> =
        SignalPhase::ALL.iter().map(|p| serde_json::to_value(p).expect("serialise")).collect();
    assert_eq!(
        wire,
        [
            json!("Downloading"),
            json!("Cordoning"),
            json!("ApplyingUpdate"),
            json!("Restart"),
            json!("UnCordoning"),
            json!("Completed"),
            json!("FailedDownload"),
            json!("Failed"),
        ]
    );
    for phase in SignalPhase::ALL {
        assert_eq!(serde_json::to_value(phase).expect("serialise"), json!(phase.as_str()));
        assert_eq!(phase.to_string(), phase.as_str());
        let back: SignalPhase = serde_json::from_value(json!(phase.as_str())).expect("parse");
        assert_eq!(back, phase);
    }
}

#[test]
fn only_completed_and_the_failures_end_a_signal() {
    let terminal: Vec<_> = SignalPhase::ALL.into_iter().filter(|p| p.is_terminal()).collect();
    assert_eq!(
        terminal,
        [SignalPhase::Completed, SignalPhase::FailedDownload, SignalPhase::Failed]
    );
    let failed: Vec<_> = SignalPhase::ALL.into_iter().filter(|p| p.is_failure()).collect();
    assert_eq!(failed, [SignalPhase::FailedDownload, SignalPhase::Failed]);
}

#[test]
fn timestamps_are_written_in_utc_whole_seconds() {
    let ts: jiff::Timestamp = "2024-05-01T14:00:05.999+02:00".parse().expect("ts");
    assert_eq!(format_timestamp(ts), "2024-05-01T12:00:05Z");
}

// === Reading ===

#[test]
fn annotations_round_trip_a_signal() {
    for data in [
        k0s_signal(),
        airgap_signal(),
        k0s_signal().with_status(SignalStatus {
            preflight: BTreeMap::new(),
            status: SignalPhase::Restarting,
            timestamp: "t".into(),
            reason: Some("r".into()),
        }),
    ] {
        let written = to_annotations(&data);
        assert_eq!(written.len(), 2);
        assert_eq!(written[keys::ANNOTATION_SIGNAL_VERSION], "v2");
        assert_eq!(from_annotations(&written).expect("valid"), Some(data));
    }
}

#[test]
fn no_annotations_mean_no_signal() {
    let other = BTreeMap::from([("a".to_owned(), "b".to_owned())]);
    assert_eq!(from_annotations(&other).expect("no error"), None);
    assert_eq!(from_meta(&ObjectMeta::default()).expect("no error"), None);
}

#[test]
fn a_signal_is_read_from_object_metadata() {
    let meta =
        ObjectMeta { annotations: Some(to_annotations(&k0s_signal())), ..ObjectMeta::default() };
    assert_eq!(from_meta(&meta).expect("valid"), Some(k0s_signal()));
}

#[test]
fn annotation_values_are_read_raw_and_each_on_its_own() {
    let both = annotations("v9", "not json");
    assert_eq!(annotation_values(&both), [Some("v9"), Some("not json")]);
    let mut only_data = both.clone();
    only_data.remove(keys::ANNOTATION_SIGNAL_VERSION);
    assert_eq!(annotation_values(&only_data), [None, Some("not json")]);
    let other = BTreeMap::from([("a".to_owned(), "b".to_owned())]);
    assert_eq!(annotation_values(&other), [None, None]);
}

#[test]
fn an_object_has_signal_annotations_when_it_carries_either_one() {
    let meta = |annotations| ObjectMeta { annotations, ..ObjectMeta::default() };
    let both = annotations("v9", "not json");
    assert!(has_annotations(&meta(Some(both.clone()))), "both, though not valid");
    for key in [keys::ANNOTATION_SIGNAL_VERSION, keys::ANNOTATION_SIGNAL_DATA] {
        let mut one = both.clone();
        one.remove(key);
        assert!(has_annotations(&meta(Some(one))), "all but {key}");
    }
    let other = BTreeMap::from([("a".to_owned(), "b".to_owned())]);
    assert!(!has_annotations(&meta(Some(other))));
    assert!(!has_annotations(&meta(Some(BTreeMap::new()))));
    assert!(!has_annotations(&meta(None)));
}

#[test]
fn a_k0s_written_signal_with_unknown_fields_is_read() {
    // k0s test data carries a `timestamp` inside `k0supdate`; the leader writes its local
    // offset in `created`.
    let data = r#"{"planId":"abc","created":"2024-05-01T14:00:00+02:00","command":{"id":0,"k0supdate":{"version":"v1.30.2+k0s.0","url":"http://127.0.0.1/k0s","timestamp":"now"}},"status":{"status":"UnCordoning","timestamp":"2024-05-01T14:01:00+02:00"},"future":1}"#;
    let read = from_annotations(&annotations("v2", data)).expect("valid").expect("present");
    assert_eq!(read.phase(), Some(SignalPhase::Uncordoning));
    let Some(UpdateRef::K0s(update)) = read.command.update() else {
        panic!("expected a k0s update, got {:?}", read.command);
    };
    assert_eq!(update.sha256, "");
    assert!(!update.forceupdate);
}

// === Validation, one rule at a time ===

fn error_of(annotations: &BTreeMap<String, String>) -> SignalError {
    from_annotations(annotations).expect_err("invalid signal")
}

#[test]
fn a_lone_annotation_is_an_error_naming_the_missing_one() {
    let mut only_version = annotations("v2", "{}");
    only_version.remove(keys::ANNOTATION_SIGNAL_DATA);
    let err = error_of(&only_version);
    assert!(
        matches!(err, SignalError::MissingAnnotation { key } if key == keys::ANNOTATION_SIGNAL_DATA)
    );
    assert_eq!(err.to_string(), "signal annotation k0sproject.io/autopilot-signal-data is missing");

    let mut only_data = annotations("v2", "{}");
    only_data.remove(keys::ANNOTATION_SIGNAL_VERSION);
    let err = error_of(&only_data);
    assert!(
        matches!(err, SignalError::MissingAnnotation { key } if key == keys::ANNOTATION_SIGNAL_VERSION)
    );
}

#[test]
fn a_version_other_than_v2_is_unsupported() {
    let json = encode(&k0s_signal()).1;
    for version in ["v1", "V2", "", "v2 "] {
        let err = error_of(&annotations(version, &json));
        assert!(matches!(&err, SignalError::UnsupportedVersion { found } if found == version));
    }
    assert_eq!(
        error_of(&annotations("v1", &json)).to_string(),
        "unsupported signal version \"v1\", expected \"v2\""
    );
}

#[test]
fn data_that_is_not_signal_json_is_invalid_json() {
    for data in [
        "",
        "not json",
        "[]",
        r#"{"planId":"a","created":"b"}"#,
        r#"{"planId":"a","created":"b","command":{"k0supdate":{"url":"http://h/","version":"v"}}}"#,
        r#"{"planId":"a","created":"b","command":{"id":null,"k0supdate":{"url":"http://h/","version":"v"}}}"#,
        r#"{"planId":"a","created":"b","command":{"id":0,"k0supdate":{"url":"http://h/","version":"v"}},"status":{"status":"","timestamp":"t"}}"#,
        r#"{"planId":"a","created":"b","command":{"id":0,"k0supdate":{"url":"http://h/","version":"v"}},"status":{"status":"Sleeping","timestamp":"t"}}"#,
    ] {
        let err = error_of(&annotations("v2", data));
        assert!(matches!(err, SignalError::InvalidJson { .. }), "{data}: {err:?}");
        assert_eq!(err.to_string(), "signal data is not valid json");
        assert!(std::error::Error::source(&err).is_some());
    }
}

#[test]
fn plan_id_and_created_must_not_be_empty() {
    let mut data = k0s_signal();
    data.plan_id.clear();
    let err = validate(&data).expect_err("invalid");
    assert!(matches!(err, SignalError::EmptyField { field: "planId" }));
    assert_eq!(err.to_string(), "signal field planId is empty");

    let mut data = k0s_signal();
    data.created.clear();
    assert!(matches!(validate(&data), Err(SignalError::EmptyField { field: "created" })));
}

#[test]
fn exactly_one_update_must_be_set() {
    let mut neither = k0s_signal();
    neither.command.k0supdate = None;
    let err = validate(&neither).expect_err("invalid");
    assert!(matches!(err, SignalError::NoUpdate));
    assert_eq!(
        err.to_string(),
        "signal field command has none of k0supdate, airgapupdate, preflight and rollback"
    );

    let mut both = k0s_signal();
    both.command.airgapupdate = airgap_signal().command.airgapupdate;
    let err = validate(&both).expect_err("invalid");
    assert!(matches!(err, SignalError::BothUpdates));
    assert_eq!(
        err.to_string(),
        "signal field command has more than one of k0supdate, airgapupdate, preflight and rollback"
    );
}

#[test]
fn the_update_url_and_version_must_not_be_empty() {
    let mut data = k0s_signal();
    if let Some(u) = data.command.k0supdate.as_mut() {
        u.url.clear();
    }
    assert!(matches!(
        validate(&data),
        Err(SignalError::EmptyField { field: "command.k0supdate.url" })
    ));

    let mut data = k0s_signal();
    if let Some(u) = data.command.k0supdate.as_mut() {
        u.version.clear();
    }
    assert!(matches!(
        validate(&data),
        Err(SignalError::EmptyField { field: "command.k0supdate.version" })
    ));

    let mut data = airgap_signal();
    if let Some(u) = data.command.airgapupdate.as_mut() {
        u.url.clear();
    }
    assert!(matches!(
        validate(&data),
        Err(SignalError::EmptyField { field: "command.airgapupdate.url" })
    ));

    let mut data = airgap_signal();
    if let Some(u) = data.command.airgapupdate.as_mut() {
        u.version.clear();
    }
    assert!(matches!(
        validate(&data),
        Err(SignalError::EmptyField { field: "command.airgapupdate.version" })
    ));
}

fn with_url(url: &str) -> SignalData {
    let mut data = k0s_signal();
    if let Some(u) = data.command.k0supdate.as_mut() {
        u.url = url.to_owned();
    }
    data
}

#[test]
fn urls_need_a_scheme_and_a_host() {
    for (url, problem) in [
        ("example.com/k0s", "no scheme"),
        ("/var/lib/k0s", "no scheme"),
        ("1http://example.com/", "no scheme"),
        ("://example.com/", "no scheme"),
        ("https://", "no host"),
        ("https:///k0s", "no host"),
        ("http://:8080/k0s", "no host"),
        ("https:", "no host"),
        ("https://example.com:port/k0s", "invalid port"),
        ("https://[::1/k0s", "unterminated ipv6 host"),
        ("https://exa mple.com/k0s", "contains whitespace or control characters"),
        ("https://example.com/k0s\n", "contains whitespace or control characters"),
    ] {
        let err = validate(&with_url(url)).expect_err(url);
        assert!(
            matches!(&err, SignalError::InvalidUrl { field: "command.k0supdate.url", url: u, problem: p } if u == url && *p == problem),
            "{url}: {err:?}"
        );
    }
    assert_eq!(
        validate(&with_url("example.com/k0s")).expect_err("invalid").to_string(),
        "signal field command.k0supdate.url is not a valid url (no scheme): \"example.com/k0s\""
    );
}

#[test]
fn urls_with_a_scheme_and_a_host_or_an_opaque_part_are_accepted() {
    for url in [
        "https://example.com/k0s",
        "http://127.0.0.1:8080/k0s?x=1#y",
        "https://user:secret@example.com/k0s",
        "https://[::1]:8443/k0s",
        "HTTPS://EXAMPLE.COM",
        "file:///var/lib/k0s/k0s",
        "file://host/k0s",
        "urn:k0s:binary",
    ] {
        assert!(validate(&with_url(url)).is_ok(), "{url}");
    }
}

#[test]
fn a_present_status_needs_a_timestamp() {
    let data = k0s_signal().with_status(SignalStatus {
        preflight: BTreeMap::new(),
        status: SignalPhase::Cordoning,
        timestamp: String::new(),
        reason: None,
    });
    let err = validate(&data).expect_err("invalid");
    assert!(matches!(err, SignalError::EmptyField { field: "status.timestamp" }));
}

#[test]
fn timestamps_are_not_parsed() {
    let mut data = k0s_signal().with_status(SignalStatus {
        preflight: BTreeMap::new(),
        status: SignalPhase::Cordoning,
        timestamp: "whenever".into(),
        reason: None,
    });
    data.created = "yesterday".into();
    assert!(validate(&data).is_ok());
}

#[test]
fn command_update_is_the_one_update_set() {
    assert!(matches!(k0s_signal().command.update(), Some(UpdateRef::K0s(_))));
    assert!(matches!(airgap_signal().command.update(), Some(UpdateRef::Airgap(_))));
    let mut neither = k0s_signal();
    neither.command.k0supdate = None;
    assert_eq!(neither.command.update(), None);
    let rollback = CommandRollback { version: "v1.35.0+k0s.0".into(), of: RollbackOf::K0s };
    let mut back = neither.clone();
    back.command.rollback = Some(rollback.clone());
    assert_eq!(back.command.update(), Some(UpdateRef::Rollback(&rollback)));
    let mut both = k0s_signal();
    both.command.rollback = Some(rollback);
    assert_eq!(both.command.update(), None);
}

// === Property: anything valid survives the annotations ===

fn non_empty() -> impl Strategy<Value = String> {
    "[ -~]{1,24}"
}

fn url() -> impl Strategy<Value = String> {
    (
        "(http|https|file)",
        "[a-z0-9.-]{1,12}",
        proptest::option::of(1u16..),
        "[a-zA-Z0-9/._~+-]{0,20}",
    )
        .prop_map(|(scheme, host, port, path)| match port {
            Some(port) => format!("{scheme}://{host}:{port}/{path}"),
            None => format!("{scheme}://{host}/{path}"),
        })
}

fn signal_data() -> impl Strategy<Value = SignalData> {
    let k0s = (url(), non_empty(), "([a-f0-9]{64})?", any::<bool>()).prop_map(
        |(url, version, sha256, forceupdate)| CommandK0sUpdate {
            url,
            version,
            sha256,
            forceupdate,
        },
    );
    let airgap = (url(), non_empty(), "([A-F0-9]{64})?")
        .prop_map(|(url, version, sha256)| CommandAirgapUpdate { url, version, sha256 });
    let command = (
        any::<u32>(),
        prop_oneof![k0s.prop_map(|u| (Some(u), None)), airgap.prop_map(|u| (None, Some(u))),],
    )
        .prop_map(|(id, (k0supdate, airgapupdate))| SignalCommand {
            rollback: None,
            preflight: None,
            id,
            k0supdate,
            airgapupdate,
        });
    let status = proptest::option::of(
        (
            proptest::sample::select(SignalPhase::ALL.to_vec()),
            non_empty(),
            proptest::option::of(".*"),
        )
            .prop_map(|(status, timestamp, reason)| SignalStatus {
                preflight: BTreeMap::new(),
                status,
                timestamp,
                reason,
            }),
    );
    let run_id = proptest::option::of(non_empty());
    (non_empty(), non_empty(), command, status, run_id).prop_map(
        |(plan_id, created, command, status, run_id)| SignalData {
            plan_id,
            created,
            command,
            status,
            run_id,
        },
    )
}

proptest! {
    #[test]
    fn any_valid_signal_round_trips_through_its_annotations(data in signal_data()) {
        prop_assert!(validate(&data).is_ok(), "{:?}", validate(&data));
        let read = from_annotations(&to_annotations(&data));
        prop_assert_eq!(read.ok().flatten(), Some(data));
    }

    #[test]
    fn reading_arbitrary_data_never_panics(data in ".*", version in "(v2|v1|)") {
        let _ = from_annotations(&annotations(&version, &data));
    }
}

#[test]
fn a_created_keeps_the_fraction_of_its_second_and_reads_back_as_a_timestamp() {
    let whole: jiff::Timestamp = "2024-05-01T12:00:00Z".parse().unwrap();
    assert_eq!(format_created(whole), "2024-05-01T12:00:00Z");
    let later = whole + std::time::Duration::from_nanos(123_456_789);
    let created = format_created(later);
    assert_eq!(created, "2024-05-01T12:00:00.123456789Z");
    assert_eq!(created.parse::<jiff::Timestamp>().unwrap(), later);
}

//! Fuzz targets of the node agent's pure parts: the phase machine over arbitrary signals
//! and facts, bundle file names from arbitrary `Content-Disposition` values and URLs, and
//! the download flags' parsers, and payload signatures and keys. No input panics; every
//! failure and refusal says why; no bad input reaches a host action; no mutated signature
//! verifies another payload than the one its key signed.

use autopilot_api::fuzz::{config, word};
use autopilot_api::payload;
use autopilot_api::signal::{CommandAirgapUpdate, CommandK0sUpdate, SignalPhase, UpdateRef};
use autopilot_engine::agent::{self as phase, Facts, HostAction, Restart, Step};
use autopilot_signal::download::{file_name_from_response, parse_sha256, parse_size};
use autopilot_signal::signature::{Expected, TrustedKeys, parse_key, parse_signature};
use proptest::prelude::*;

/// The strings of one update command: mostly plausible, sometimes anything.
fn update_strings() -> impl Strategy<Value = (String, String, String)> {
    let url = prop_oneof![
        Just("https://127.0.0.1/k0s".to_owned()),
        "(https?|ftp|file)://[a-z0-9.:@\\[\\]]{0,12}(/[a-z%.]{0,8}){0,3}",
        word(),
    ];
    let version = prop_oneof![Just("v1.35.1+k0s.0".to_owned()), word()];
    let sha256 = prop_oneof![Just("ab".repeat(32)), Just(String::new()), "[0-9a-fA-FxX]{0,70}"];
    (url, version, sha256)
}

fn restart() -> impl Strategy<Value = (u8, String, String)> {
    (0u8..3, word(), word())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn the_phase_machine_answers_every_signal(
        phase in proptest::option::of(proptest::sample::select(SignalPhase::ALL.to_vec())),
        (url, version, sha256) in update_strings(),
        airgap in any::<bool>(),
        forceupdate in any::<bool>(),
        running_version in prop_oneof![Just("v1.35.1+k0s.0".to_owned()), word()],
        (staged, proven, kubelet, drained) in
            (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()),
        live_sha256 in proptest::option::of(prop_oneof![Just("ab".repeat(32)), word()]),
        (restart_kind, rolled_to, rolled_reason) in restart(),
    ) {
        let k0s = CommandK0sUpdate {
            url: url.clone(), version: version.clone(), sha256: sha256.clone(), forceupdate,
        };
        let bundle = CommandAirgapUpdate { url: url.clone(), version: version.clone(), sha256 };
        let update = if airgap { UpdateRef::Airgap(&bundle) } else { UpdateRef::K0s(&k0s) };
        let restart = match restart_kind {
            0 => Restart::NotYet,
            1 => Restart::Done,
            _ => Restart::RolledBack { to: &rolled_to, reason: &rolled_reason },
        };
        let facts = Facts {
            update,
            running_version: &running_version,
            staged,
            proven,
            live_sha256: live_sha256.as_deref(),
            restart,
            kubelet,
            drained,
        };
        let step = phase::next(phase, &facts);
        match &step {
            Step::Report { phase: SignalPhase::Failed | SignalPhase::FailedDownload, reason } => {
                prop_assert!(
                    reason.as_deref().is_some_and(|r| !r.trim().is_empty()),
                    "a failure without a reason: {step:?}"
                );
            }
            Step::Run { action: HostAction::Download { url: to, .. }
                | HostAction::DownloadBundle { url: to, .. }, .. } => {
                // Nothing is fetched from a URL or for a version the node refuses.
                prop_assert_eq!(to, &url);
                prop_assert!(payload::url_problem(&url).is_none(), "fetching from {url:?}");
                prop_assert!(payload::version_problem(&version).is_none());
            }
            Step::Run { action: HostAction::Restart, .. } => {
                // Nothing restarts past a drain the Plan does not record.
                prop_assert!(drained, "a restart without the drain on record: {step:?}");
            }
            Step::Report { .. } | Step::Run { .. } | Step::Wait(_) | Step::Done => {}
        }
        // A signal the node refuses is answered at once unless it already ended.
        if phase::refusal(update).is_some() && !phase.is_some_and(SignalPhase::is_terminal) {
            let failed = matches!(step, Step::Report { phase: SignalPhase::Failed, .. });
            prop_assert!(failed, "a refused signal was not answered: {step:?}");
        }
    }

    #[test]
    fn bundle_file_names_are_single_safe_names(
        disposition in proptest::option::of(prop_oneof![
            word().prop_map(|name| format!("attachment; filename=\"{name}\"")),
            word().prop_map(|name| format!("attachment;filename={name}")),
            any::<String>(),
        ]),
        path in "(/[a-zA-Z0-9%._ -]{0,16}){0,4}",
    ) {
        let Ok(url) = format!("http://127.0.0.1{path}").parse() else { return Ok(()) };
        if let Some(name) = file_name_from_response(disposition.as_deref(), &url) {
            prop_assert!(!name.is_empty() && name != "." && name != "..", "{name:?}");
            prop_assert!(!name.contains(['/', '\\', '\0']), "{name:?}");
            prop_assert!(!name.chars().any(char::is_control), "{name:?}");
            prop_assert!(name.len() <= 255, "{} bytes", name.len());
        }
    }

    #[test]
    fn download_flags_parse_or_say_why(text in prop_oneof![word(), "[0-9]{0,25}[KMGTkmgti]{0,2}", any::<String>()]) {
        if let Err(reason) = parse_size(&text) {
            prop_assert!(!reason.trim().is_empty());
        }
        match parse_sha256(&text) {
            Ok(hex) => prop_assert!(hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())),
            Err(err) => {
                let reason = format!("{err:#}");
                prop_assert!(!reason.trim().is_empty());
            }
        }
    }
}

/// minisign-verify's own test vector: its key signed the four bytes `test` (prehashed).
const MINISIGN_KEY: &str = "untrusted comment: minisign public key\nRWQf6LRCGA9i53mlYecO4IzT51TGPpvWucNSCh1CBM0QTaLn73Y7GFO3\n";
const MINISIGN_SIG: &str = "untrusted comment: signature from minisign secret key\nRUQf6LRCGA9i559r3g7V1qNyJDApGip8MfqcadIgT9CuhV3EMhHoN1mGTkUidF/z7SrlQgXdy8ofjb7bNJJylDOocrCo8KLzZwo=\ntrusted comment: timestamp:1633700835\tfile:test\tprehashed\nwLMDjy9FLAuxZ3q4NlEvkgtyhrr0gtTu6KC4KBJdITbbOeAi1zBIYo0v4iTgt8jJpIidRJnp94ABQkJAgAooBQ==\n";

/// Files the real cosign (v2.6.5 and v3.1.3, offline, each with a key pair of its own) made
/// over the same four bytes `test`: cosign 2's `.sig` and bundle, cosign 3's default bundle.
const COSIGN2_PUB: &str = include_str!("../src/signature/cosign-fixtures/cosign2.pub");
const COSIGN2_SIG: &str = include_str!("../src/signature/cosign-fixtures/cosign2.sig");
const COSIGN2_BUNDLE: &str = include_str!("../src/signature/cosign-fixtures/cosign2.bundle");
const COSIGN3_PUB: &str = include_str!("../src/signature/cosign-fixtures/cosign3.pub");
const COSIGN3_BUNDLE: &str = include_str!("../src/signature/cosign-fixtures/cosign3.sigstore.json");

/// A node trusting the test vector's key and the two cosign keys.
static KEYS: std::sync::LazyLock<TrustedKeys> = std::sync::LazyLock::new(|| {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("minisign.pub"), MINISIGN_KEY).expect("key");
    std::fs::write(dir.path().join("cosign2.pub"), COSIGN2_PUB).expect("key");
    std::fs::write(dir.path().join("cosign3.pub"), COSIGN3_PUB).expect("key");
    TrustedKeys::load(dir.path()).expect("the test vector's key and the cosign keys")
});

/// `text` with a few byte edits (flip, cut, insert) at arbitrary places.
fn edited(text: &'static str) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 0..4).prop_map(move |edits| {
        let mut bytes = text.as_bytes().to_vec();
        for (at, byte, how) in edits {
            let at = at % (bytes.len() + 1);
            match how {
                0 if at < bytes.len() => bytes[at] ^= byte.max(1),
                1 => bytes.truncate(at),
                _ => bytes.insert(at, byte),
            }
        }
        bytes
    })
}

/// A cosign 2 bundle around arbitrary signature text, with or without a log entry.
fn cosign2_bundle() -> impl Strategy<Value = Vec<u8>> {
    (prop_oneof![word(), Just(COSIGN2_SIG.to_owned())], any::<bool>()).prop_map(
        |(signature, logged)| {
            let mut bundle = serde_json::json!({"base64Signature": signature, "cert": ""});
            if logged {
                bundle["rekorBundle"] = serde_json::json!({"SignedEntryTimestamp": signature});
            }
            bundle.to_string().into_bytes()
        },
    )
}

/// A cosign 3 bundle around arbitrary signature and digest text.
fn bundle() -> impl Strategy<Value = Vec<u8>> {
    (word(), word(), prop_oneof![Just("SHA2_256".to_owned()), word()]).prop_map(
        |(signature, digest, algorithm)| {
            serde_json::json!({
                "messageSignature": {
                    "messageDigest": {"algorithm": algorithm, "digest": digest},
                    "signature": signature,
                },
            })
            .to_string()
            .into_bytes()
        },
    )
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn signatures_parse_or_say_why_and_verify_only_what_the_key_signed(
        bytes in prop_oneof![
            edited(MINISIGN_SIG),
            edited(COSIGN2_SIG),
            edited(COSIGN2_BUNDLE),
            edited(COSIGN3_BUNDLE),
            bundle(),
            cosign2_bundle(),
            any::<Vec<u8>>(),
            word().prop_map(String::into_bytes),
        ],
        payload in prop_oneof![Just(b"test".to_vec()), any::<Vec<u8>>()],
        split in any::<usize>(),
    ) {
        let keys = &*KEYS;
        let signature = match parse_signature(&bytes) {
            Ok(signature) => signature,
            Err(reason) => {
                prop_assert!(!reason.trim().is_empty());
                return Ok(());
            }
        };
        let Ok(mut check) = (Expected { keys, signature: &signature }).start() else {
            return Ok(());
        };
        let (head, tail) = payload.split_at(split % (payload.len() + 1));
        check.update(head);
        check.update(tail);
        let sha256: [u8; 32] = <sha2::Sha256 as sha2::Digest>::digest(&payload).into();
        match check.finish(&sha256) {
            Ok(id) => {
                prop_assert_eq!(&payload, b"test", "only the signed payload verifies");
                prop_assert!(keys.ids().contains(&id.as_str()), "{id} is a trusted key");
            }
            Err(reason) => prop_assert!(!reason.trim().is_empty()),
        }
    }

    #[test]
    fn key_files_parse_or_name_the_file(text in prop_oneof![
        edited(MINISIGN_KEY).prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        any::<String>(),
        Just("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----".to_owned()),
    ]) {
        match parse_key("keys/k.pub", &text) {
            Ok(key) => prop_assert!(key.id.len() == 64 && key.id.bytes().all(|b| b.is_ascii_hexdigit())),
            Err(reason) => prop_assert!(reason.starts_with("keys/k.pub: "), "{reason}"),
        }
    }
}

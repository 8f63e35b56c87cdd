//! Signed payloads on a real host (DESIGN §14): a node with trusted keys stages a binary only
//! with a valid signature by one of them, checked over the download stream; every other case
//! ends with the reason and nothing staged, the live binary untouched. A staged binary or
//! pre-staged bundle is used only while a key that verified it is still trusted (issue 46):
//! after the node's keys changed it is downloaded and verified again. Keys and cosign-format
//! signatures are made at test time with `openssl`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use autopilot_api::signal::{CommandK0sUpdate, UpdateRef};
use autopilot_signal::download::{DownloadConfig, DownloadError};
use autopilot_signal::host::{
    Host as _, HostError, LinuxHost, SignalKey, SignatureSource, Signing,
};
use autopilot_signal::signature::TrustedKeys;
use base64::Engine as _;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use sha2::{Digest as _, Sha256};

const OLD: &[u8] = b"#!/bin/sh\necho v1\n";
const NEW: &[u8] = b"#!/bin/sh\necho v2\n";

/// Serves `files` (path to body); anything else is 404.
async fn serve(files: HashMap<&'static str, Vec<u8>>) -> SocketAddr {
    let files = Arc::new(files);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let files = files.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let files = files.clone();
                    async move {
                        let response = match files.get(req.uri().path()) {
                            Some(body) => Response::new(Full::new(Bytes::from(body.clone()))),
                            None => Response::builder()
                                .status(StatusCode::NOT_FOUND)
                                .body(Full::new(Bytes::new()))
                                .expect("response"),
                        };
                        Ok::<_, Infallible>(response)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

fn openssl(args: &[&str], paths: &[&Path]) -> Vec<u8> {
    let out = Command::new("openssl").args(args).args(paths).output().expect("openssl runs");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// A P-256 key made by `openssl`; its public half in `keys_dir` (if given). Returns the
/// private key's path.
fn p256_key(dir: &Path, name: &str, keys_dir: Option<&Path>) -> PathBuf {
    let key = dir.join(format!("{name}.pem"));
    openssl(&["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out"], &[&key]);
    if let Some(keys_dir) = keys_dir {
        let public = keys_dir.join(format!("{name}.pub"));
        openssl(&["ec", "-pubout", "-in"], &[&key, Path::new("-out"), &public]);
    }
    key
}

/// What `cosign sign-blob` writes for `data`: base64 of the DER ECDSA-P256-SHA256 signature.
fn cosign_sig(dir: &Path, key: &Path, data: &[u8]) -> String {
    let blob = dir.join("blob");
    std::fs::write(&blob, data).expect("blob");
    let der = openssl(&["dgst", "-sha256", "-sign"], &[key, &blob]);
    base64::engine::general_purpose::STANDARD.encode(der)
}

struct Node {
    dir: tempfile::TempDir,
    host: LinuxHost,
    keys: TrustedKeys,
}

impl Node {
    /// A node trusting the keys in `keys_dir`, as its default keys directory (nothing
    /// there: no keys).
    fn trusting(dir: tempfile::TempDir, keys_dir: &Path, require_signed_bundles: bool) -> Self {
        std::fs::create_dir_all(dir.path().join("bin")).expect("bin");
        let live = dir.path().join("bin/k0s");
        std::fs::write(&live, OLD).expect("live");
        std::fs::set_permissions(&live, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let keys = TrustedKeys::load_default(keys_dir).expect("keys").unwrap_or_default();
        let signing = Signing { keys: keys.clone(), require_signed_bundles, refuse_all: None };
        let host = LinuxHost::new(live, dir.path().join("data"), DownloadConfig::default())
            .expect("host")
            .with_signing(signing);
        Self { dir, host, keys }
    }

    async fn download(
        &self,
        addr: SocketAddr,
        signature: SignatureSource,
    ) -> Result<(), HostError> {
        let key = key();
        let sha = hex::encode(Sha256::digest(NEW));
        self.host.download(&key, &format!("http://{addr}/k0s"), Some(&sha), &signature).await
    }

    /// Nothing staged, no temp file, the live binary as it was.
    fn untouched(&self) {
        let mut names: Vec<String> = std::fs::read_dir(self.dir.path().join("bin"))
            .expect("bin")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, vec!["k0s"], "nothing staged and no temp file left");
        assert_eq!(std::fs::read(self.dir.path().join("bin/k0s")).expect("live"), OLD);
    }

    /// The same node started again (same live binary, data directory and staged files),
    /// now trusting the keys in `keys_dir`.
    fn restarted(self, keys_dir: &Path, require_signed_bundles: bool) -> Self {
        let keys = TrustedKeys::load_default(keys_dir).expect("keys").unwrap_or_default();
        let signing = Signing { keys: keys.clone(), require_signed_bundles, refuse_all: None };
        let live = self.dir.path().join("bin/k0s");
        let host = LinuxHost::new(live, self.dir.path().join("data"), DownloadConfig::default())
            .expect("host")
            .with_signing(signing);
        Self { dir: self.dir, host, keys }
    }

    /// Whether the node takes its staged binary for an update to [`NEW`].
    async fn takes_staged(&self, addr: SocketAddr) -> bool {
        let update = CommandK0sUpdate {
            url: format!("http://{addr}/k0s"),
            version: "v2".into(),
            sha256: hex::encode(Sha256::digest(NEW)),
            forceupdate: false,
        };
        self.host.observe(&key(), UpdateRef::K0s(&update)).await.expect("observing").staged
    }

    fn staged(&self) -> Vec<u8> {
        std::fs::read(self.dir.path().join("bin/k0s.tmp")).expect("a staged binary")
    }
}

fn inline(text: &str) -> SignatureSource {
    SignatureSource { inline: Some(text.to_owned()), url: None }
}

#[tokio::test]
async fn a_cosign_signature_by_a_trusted_key_stages_the_binary_and_every_bad_one_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let keys_dir = dir.path().join("keys");
    std::fs::create_dir(&keys_dir).expect("keys dir");
    let trusted = p256_key(dir.path(), "release", Some(&keys_dir));
    let stranger = p256_key(dir.path(), "stranger", None);
    let good = cosign_sig(dir.path(), &trusted, NEW);
    let by_stranger = cosign_sig(dir.path(), &stranger, NEW);
    let over_other_bytes = cosign_sig(dir.path(), &trusted, OLD);
    let addr = serve(HashMap::from([
        ("/k0s", NEW.to_vec()),
        ("/k0s.sig", good.clone().into_bytes()),
        ("/k0s.bad", by_stranger.clone().into_bytes()),
    ]))
    .await;
    let node = |name: &str| {
        Node::trusting(tempfile::tempdir_in(dir.path()).expect(name), &keys_dir, false)
    };

    // Inline and from signatureURL: staged.
    let n = node("inline");
    n.download(addr, inline(&good)).await.expect("a good inline signature");
    assert_eq!(n.staged(), NEW);
    let n = node("url");
    let from_url = SignatureSource { inline: None, url: Some(format!("http://{addr}/k0s.sig")) };
    n.download(addr, from_url).await.expect("a good signature from its URL");
    assert_eq!(n.staged(), NEW);

    // A cosign bundle's messageSignature.
    let b64 = base64::engine::general_purpose::STANDARD;
    let bundle = serde_json::json!({
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "messageSignature": {
            "messageDigest": {"algorithm": "SHA2_256", "digest": b64.encode(Sha256::digest(NEW))},
            "signature": good,
        },
    })
    .to_string();
    let n = node("bundle");
    n.download(addr, inline(&bundle)).await.expect("a good bundle");
    assert_eq!(n.staged(), NEW);

    // Wrong key, signature over other bytes: the download is not kept.
    for (case, signature) in [("wrong key", by_stranger), ("other bytes", over_other_bytes)] {
        let n = node(case);
        let err = n.download(addr, inline(&signature)).await.expect_err(case);
        assert!(
            matches!(&err, HostError::Download(DownloadError::Signature { .. })),
            "{case}: {err:?}"
        );
        assert!(
            err.reason().contains("no trusted key made this signature"),
            "{case}: {}",
            err.reason()
        );
        n.untouched();
    }

    // Truncated, garbled, missing, unreachable: refused before anything is staged.
    let cases = [
        ("truncated", inline(&good[..good.len() / 2]), "signature is unusable"),
        ("garbled", inline("definitely not a signature"), "signature is unusable"),
        ("missing", SignatureSource::default(), "the Plan gives no signature for the binary"),
        (
            "404",
            SignatureSource { inline: None, url: Some(format!("http://{addr}/k0s.nowhere")) },
            "fetching the binary signature",
        ),
    ];
    for (case, source, why) in cases {
        let n = node(case);
        let err = n.download(addr, source).await.expect_err(case);
        assert!(matches!(err, HostError::Signature { .. }), "{case}: {err:?}");
        assert!(err.reason().contains(why), "{case}: {}", err.reason());
        if case == "missing" {
            assert!(
                err.reason().contains(&n.keys.ids()[0].to_owned()),
                "names the key: {}",
                err.reason()
            );
        }
        n.untouched();
    }
}

#[tokio::test]
async fn a_node_without_keys_checks_no_signature() {
    let dir = tempfile::tempdir().expect("tempdir");
    let addr = serve(HashMap::from([("/k0s", NEW.to_vec())])).await;
    let n = Node::trusting(
        tempfile::tempdir_in(dir.path()).expect("node"),
        &dir.path().join("none"),
        false,
    );
    n.download(addr, SignatureSource::default()).await.expect("no keys: no signature needed");
    assert_eq!(n.staged(), NEW);
}

#[tokio::test]
async fn a_node_whose_required_keys_are_gone_refuses_every_payload_signed_or_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let addr =
        serve(HashMap::from([("/k0s", NEW.to_vec()), ("/b/bundle.tar", b"test".to_vec())])).await;
    let mut n = Node::trusting(
        tempfile::tempdir_in(dir.path()).expect("node"),
        &dir.path().join("gone"),
        false,
    );
    let why = "this node required signed payloads before (…) but its keys directory … is missing";
    let signing = Signing { refuse_all: Some(why.to_owned()), ..Signing::default() };
    n.host = n.host.with_signing(signing);
    for signature in [SignatureSource::default(), inline(MINISIGN_SIG)] {
        let err = n.download(addr, signature.clone()).await.expect_err("refused");
        assert!(matches!(&err, HostError::Signature { reason } if reason == why), "{err:?}");
        let url = format!("http://{addr}/b/bundle.tar");
        let sha = hex::encode(Sha256::digest(b"test"));
        let err = n.host.download_bundle(&key(), &url, Some(&sha), &signature).await;
        assert!(matches!(&err, Err(HostError::Signature { reason }) if reason == why), "{err:?}");
    }
    n.untouched();
}

/// minisign-verify's own test vector: `test`, signed prehashed.
const MINISIGN_KEY: &str = "untrusted comment: minisign public key\nRWQf6LRCGA9i53mlYecO4IzT51TGPpvWucNSCh1CBM0QTaLn73Y7GFO3\n";
const MINISIGN_SIG: &str = "untrusted comment: signature from minisign secret key\nRUQf6LRCGA9i559r3g7V1qNyJDApGip8MfqcadIgT9CuhV3EMhHoN1mGTkUidF/z7SrlQgXdy8ofjb7bNJJylDOocrCo8KLzZwo=\ntrusted comment: timestamp:1633700835\tfile:test\tprehashed\nwLMDjy9FLAuxZ3q4NlEvkgtyhrr0gtTu6KC4KBJdITbbOeAi1zBIYo0v4iTgt8jJpIidRJnp94ABQkJAgAooBQ==\n";

#[tokio::test]
async fn a_bundle_needs_a_signature_only_when_required_and_a_given_one_is_checked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let keys_dir = dir.path().join("keys");
    std::fs::create_dir(&keys_dir).expect("keys dir");
    std::fs::write(keys_dir.join("minisign.pub"), MINISIGN_KEY).expect("key");
    // The test vector signs the four bytes `test`: served as the bundle.
    let addr = serve(HashMap::from([("/b/bundle.tar", b"test".to_vec())])).await;
    let url = format!("http://{addr}/b/bundle.tar");
    let sha = hex::encode(Sha256::digest(b"test"));
    let node = |name: &str, require: bool| {
        Node::trusting(tempfile::tempdir_in(dir.path()).expect(name), &keys_dir, require)
    };

    // Not required, none given: accepted.
    let n = node("optional", false);
    n.host
        .download_bundle(&key(), &url, Some(&sha), &SignatureSource::default())
        .await
        .expect("unsigned");
    // Not required, but given: checked, and a good one passes (streamed minisign).
    let n = node("given", false);
    n.host.download_bundle(&key(), &url, Some(&sha), &inline(MINISIGN_SIG)).await.expect("signed");
    // Required and missing: refused naming the key.
    let n = node("required", true);
    let err = n
        .host
        .download_bundle(&key(), &url, Some(&sha), &SignatureSource::default())
        .await
        .expect_err("required");
    assert!(
        err.reason().contains("the Plan gives no signature for the airgap bundle"),
        "{}",
        err.reason()
    );
    assert!(err.reason().contains(n.keys.ids()[0]), "names the key: {}", err.reason());
    // A minisign signature over other bytes: the stream does not verify.
    let addr = serve(HashMap::from([("/b/bundle.tar", b"tesT".to_vec())])).await;
    let url = format!("http://{addr}/b/bundle.tar");
    let sha = hex::encode(Sha256::digest(b"tesT"));
    let n = node("tampered", true);
    let err = n
        .host
        .download_bundle(&key(), &url, Some(&sha), &inline(MINISIGN_SIG))
        .await
        .expect_err("tampered");
    assert!(matches!(&err, HostError::Download(DownloadError::Signature { .. })), "{err:?}");
    assert!(err.reason().contains("minisign signature does not verify"), "{}", err.reason());
    let images = n.dir.path().join("data/images");
    let left: Vec<_> = std::fs::read_dir(&images).expect("images").collect();
    assert!(left.is_empty(), "nothing kept in {}: {left:?}", images.display());
}

#[tokio::test]
async fn a_staged_binary_is_used_only_while_a_key_that_verified_it_is_still_trusted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let [release_only, both, rotated_only] =
        ["release-only", "both", "rotated-only"].map(|name| dir.path().join(name));
    for keys in [&release_only, &both, &rotated_only] {
        std::fs::create_dir(keys).expect("keys dir");
    }
    let release = p256_key(dir.path(), "release", Some(&release_only));
    std::fs::copy(release_only.join("release.pub"), both.join("release.pub")).expect("copy");
    let rotated = p256_key(dir.path(), "rotated", Some(&rotated_only));
    std::fs::copy(rotated_only.join("rotated.pub"), both.join("rotated.pub")).expect("copy");
    let by_release = cosign_sig(dir.path(), &release, NEW);
    let by_rotated = cosign_sig(dir.path(), &rotated, NEW);
    let addr = serve(HashMap::from([("/k0s", NEW.to_vec())])).await;

    // Staged under the release key: taken, also after a key was added.
    let n = Node::trusting(tempfile::tempdir_in(dir.path()).expect("node"), &release_only, false);
    n.download(addr, inline(&by_release)).await.expect("staged");
    assert!(n.takes_staged(addr).await);
    let n = n.restarted(&both, false);
    assert!(n.takes_staged(addr).await, "the key that verified it is still trusted");

    // The release key withdrawn: the staged file is not taken; downloaded again, the Plan's
    // signature by the withdrawn key is refused and nothing stays staged.
    let n = n.restarted(&rotated_only, false);
    assert!(!n.takes_staged(addr).await, "verified by a key no longer trusted");
    let err = n.download(addr, inline(&by_release)).await.expect_err("refused");
    assert!(err.reason().contains("no trusted key made this signature"), "{}", err.reason());
    n.untouched();
    // Signed by the key trusted now: staged and taken again.
    n.download(addr, inline(&by_rotated)).await.expect("staged again");
    assert!(n.takes_staged(addr).await);

    // Staged while the node required no signature, then given keys: not taken.
    let none = dir.path().join("no-keys");
    let n = Node::trusting(tempfile::tempdir_in(dir.path()).expect("node"), &none, false);
    n.download(addr, SignatureSource::default()).await.expect("staged without keys");
    assert!(n.takes_staged(addr).await);
    let n = n.restarted(&release_only, false);
    assert!(!n.takes_staged(addr).await, "never verified by a key trusted now");
}

#[tokio::test]
async fn a_pre_staged_bundle_is_used_only_while_a_key_that_verified_it_is_still_trusted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let minisign_keys = dir.path().join("minisign");
    std::fs::create_dir(&minisign_keys).expect("keys dir");
    std::fs::write(minisign_keys.join("minisign.pub"), MINISIGN_KEY).expect("key");
    let other_keys = dir.path().join("other");
    std::fs::create_dir(&other_keys).expect("keys dir");
    p256_key(dir.path(), "other", Some(&other_keys));
    let addr = serve(HashMap::from([("/b/bundle.tar", b"test".to_vec())])).await;
    let url = format!("http://{addr}/b/bundle.tar");
    let sha = hex::encode(Sha256::digest(b"test"));
    let nowhere = format!("http://{addr}/b/gone/bundle.tar");
    let stage = |n: &Node| {
        let (url, sha) = (url.clone(), sha.clone());
        let host = n.host.clone();
        async move { host.stage_bundle(&url, Some(&sha), &inline(MINISIGN_SIG)).await }
    };

    // Still trusted: the staged bundle is taken (the URL is not fetched again: it would
    // answer 404 now).
    let n = Node::trusting(tempfile::tempdir_in(dir.path()).expect("node"), &minisign_keys, true);
    stage(&n).await.expect("pre-staged");
    let n = n.restarted(&minisign_keys, true);
    let record = n.dir.path().join("data/autopilot-staged-bundle.json");
    let text = std::fs::read_to_string(&record).expect("the staging record");
    let text = text.replace(&url, &nowhere);
    std::fs::write(&record, text).expect("record");
    n.host
        .download_bundle(&key(), &nowhere, Some(&sha), &inline(MINISIGN_SIG))
        .await
        .expect("the pre-staged bundle is taken");

    // Its key withdrawn: not taken; the download verifies the Plan's signature against the
    // keys trusted now, and refuses it.
    let n = Node::trusting(tempfile::tempdir_in(dir.path()).expect("node"), &minisign_keys, true);
    stage(&n).await.expect("pre-staged");
    let n = n.restarted(&other_keys, true);
    let err = n
        .host
        .download_bundle(&key(), &url, Some(&sha), &inline(MINISIGN_SIG))
        .await
        .expect_err("a bundle no trusted key signed");
    assert!(err.reason().contains("no trusted key made this signature"), "{}", err.reason());
}

/// The signal the downloads are for.
fn key() -> SignalKey {
    SignalKey {
        plan_id: "id".into(),
        created: "2026-11-26T00:00:00Z".into(),
        command_id: 0,
        run_id: Some("r".into()),
    }
}

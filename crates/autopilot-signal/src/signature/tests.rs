use std::process::Command;

use super::*;

/// A P-256 key pair made by `openssl` in `dir`: `(private key path, public key PEM)`.
fn openssl_key(dir: &Path, name: &str) -> (std::path::PathBuf, String) {
    let key = dir.join(format!("{name}.pem"));
    let public = dir.join(format!("{name}.pub"));
    let made = Command::new("openssl")
        .args(["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out"])
        .arg(&key)
        .status()
        .expect("openssl runs");
    assert!(made.success());
    let exported = Command::new("openssl")
        .args(["ec", "-pubout", "-in"])
        .arg(&key)
        .arg("-out")
        .arg(&public)
        .output()
        .expect("openssl runs");
    assert!(exported.status.success());
    (key, std::fs::read_to_string(public).expect("the public key"))
}

/// What `cosign sign-blob` writes: base64 of the DER ECDSA-P256-SHA256 signature of `data`.
fn openssl_sign(dir: &Path, key: &Path, data: &[u8]) -> String {
    let blob = dir.join("blob");
    std::fs::write(&blob, data).expect("the blob");
    let out = Command::new("openssl")
        .args(["dgst", "-sha256", "-sign"])
        .arg(key)
        .arg(&blob)
        .output()
        .expect("openssl runs");
    assert!(out.status.success());
    base64::engine::general_purpose::STANDARD.encode(out.stdout)
}

fn sha256(data: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(data).into()
}

fn cosign(signature: &str) -> Cosign {
    match parse_signature(signature.as_bytes()).expect("a signature") {
        Signature::Cosign(cosign) => cosign,
        Signature::Minisign(_) => panic!("a cosign signature"),
    }
}

#[test]
fn a_cosign_signature_made_by_openssl_verifies_against_the_payloads_sha256() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (key, public) = openssl_key(dir.path(), "release");
    let (other_key, other_public) = openssl_key(dir.path(), "other");
    let keys_dir = dir.path().join("keys");
    std::fs::create_dir(&keys_dir).expect("keys dir");
    std::fs::write(keys_dir.join("cosign.pub"), &public).expect("the key");
    let keys = TrustedKeys::load(&keys_dir).expect("the keys");
    let id = keys.ids()[0].to_owned();
    assert_eq!(id.len(), 64, "a hex SHA-256");

    let payload = b"the k0s binary";
    let signature = openssl_sign(dir.path(), &key, payload);
    assert_eq!(keys.verify_prehashed(&cosign(&signature), &sha256(payload)), Ok(id.as_str()));
    let parsed = parse_signature(signature.as_bytes()).expect("parsed");
    let mut check = Expected { keys: &keys, signature: &parsed }.start().expect("cosign");
    check.update(payload);
    assert_eq!(check.finish(&sha256(payload)), Ok(id.clone()), "the same through a Check");
    // Another payload, another key, a cut or garbled signature: refused.
    assert!(keys.verify_prehashed(&cosign(&signature), &sha256(b"something else")).is_err());
    let by_other = openssl_sign(dir.path(), &other_key, payload);
    assert!(keys.verify_prehashed(&cosign(&by_other), &sha256(payload)).is_err());
    let other_keys = {
        let only_other = dir.path().join("other-keys");
        std::fs::create_dir(&only_other).expect("dir");
        std::fs::write(only_other.join("other.pub"), &other_public).expect("key");
        TrustedKeys::load(&only_other).expect("keys")
    };
    assert!(other_keys.verify_prehashed(&cosign(&signature), &sha256(payload)).is_err());
    assert!(parse_signature(&signature.as_bytes()[..signature.len() / 2]).is_err(), "truncated");
    assert!(parse_signature(b"not a signature at all").is_err());
}

#[test]
fn a_cosign_bundles_message_signature_verifies_and_its_digest_must_be_the_payloads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (key, public) = openssl_key(dir.path(), "release");
    let keys_dir = dir.path().join("keys");
    std::fs::create_dir(&keys_dir).expect("keys dir");
    std::fs::write(keys_dir.join("cosign.pub"), &public).expect("the key");
    let keys = TrustedKeys::load(&keys_dir).expect("the keys");
    let payload = b"the k0s binary";
    let signature = openssl_sign(dir.path(), &key, payload);
    let b64 = base64::engine::general_purpose::STANDARD;
    let bundle = |digest: &[u8; 32]| {
        serde_json::json!({
            "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
            "verificationMaterial": {"publicKey": {"hint": "x"}},
            "messageSignature": {
                "messageDigest": {"algorithm": "SHA2_256", "digest": b64.encode(digest)},
                "signature": signature,
            },
        })
        .to_string()
    };
    let good = cosign(&bundle(&sha256(payload)));
    assert!(keys.verify_prehashed(&good, &sha256(payload)).is_ok());
    let lying = cosign(&bundle(&sha256(b"another payload")));
    let refused = keys.verify_prehashed(&lying, &sha256(payload)).expect_err("a digest mismatch");
    assert!(refused.contains("messageDigest"), "{refused}");
}

/// minisign-verify's own test vector: `test`, signed prehashed.
const MINISIGN_KEY: &str = "untrusted comment: minisign public key\nRWQf6LRCGA9i53mlYecO4IzT51TGPpvWucNSCh1CBM0QTaLn73Y7GFO3\n";
const MINISIGN_SIG: &str = "untrusted comment: signature from minisign secret key\nRUQf6LRCGA9i559r3g7V1qNyJDApGip8MfqcadIgT9CuhV3EMhHoN1mGTkUidF/z7SrlQgXdy8ofjb7bNJJylDOocrCo8KLzZwo=\ntrusted comment: timestamp:1633700835\tfile:test\tprehashed\nwLMDjy9FLAuxZ3q4NlEvkgtyhrr0gtTu6KC4KBJdITbbOeAi1zBIYo0v4iTgt8jJpIidRJnp94ABQkJAgAooBQ==\n";

#[test]
fn a_minisign_signature_verifies_over_the_stream_in_chunks() {
    let key = parse_key("minisign.pub", MINISIGN_KEY).expect("a minisign key");
    let keys = TrustedKeys { keys: vec![key] };
    let signature = parse_signature(MINISIGN_SIG.as_bytes()).expect("parsed");
    let Signature::Minisign(minisign) = &signature else { panic!("a minisign signature") };
    assert!(keys.minisign_key(minisign).is_ok(), "the key that signed");
    let expected = Expected { keys: &keys, signature: &signature };
    let mut check = expected.start().expect("a trusted key");
    check.update(b"te");
    check.update(b"st");
    let id = check.finish(&sha256(b"test")).expect("verifies");
    assert_eq!(id, keys.ids()[0]);
    let mut tampered = expected.start().expect("a trusted key");
    tampered.update(b"tesT");
    assert!(tampered.finish(&sha256(b"tesT")).is_err());
    // A cosign-only node has no key for it.
    let none = TrustedKeys::default();
    assert!(none.minisign_key(minisign).is_err());
    assert!(Expected { keys: &none, signature: &signature }.start().is_err());
    assert!(none.is_empty());
}

#[test]
fn a_file_in_the_keys_directory_that_is_no_key_is_an_error_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("notes.txt"), "remember the milk").expect("file");
    let error = TrustedKeys::load(dir.path()).expect_err("not a key");
    assert!(error.contains("notes.txt"), "{error}");
    assert!(TrustedKeys::load(&dir.path().join("absent")).expect("no dir").is_empty());
}

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

/// A node trusting one P-256 key made by `openssl` in `dir`: `(keys, private key path)`.
fn one_cosign_key(dir: &Path) -> (TrustedKeys, std::path::PathBuf) {
    let (key, public) = openssl_key(dir, "release");
    let keys_dir = dir.join("keys");
    std::fs::create_dir(&keys_dir).expect("keys dir");
    std::fs::write(keys_dir.join("cosign.pub"), &public).expect("the key");
    (TrustedKeys::load(&keys_dir).expect("the keys"), key)
}

/// The file cosign 2's `sign-blob --bundle` writes: the `.sig`'s text as `base64Signature`,
/// beside the certificate (empty with a key) and the transparency-log entry (absent
/// offline).
fn cosign2_bundle(signature: &str) -> String {
    serde_json::json!({"base64Signature": signature, "cert": ""}).to_string()
}

#[test]
fn a_cosign_2_bundles_base64_signature_verifies_like_a_sig() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (keys, key) = one_cosign_key(dir.path());
    let payload = b"the k0s binary";
    let signature = openssl_sign(dir.path(), &key, payload);
    let bundle = cosign(&cosign2_bundle(&signature));
    assert_eq!(keys.verify_prehashed(&bundle, &sha256(payload)), Ok(keys.ids()[0]));
    // With a transparency-log entry beside it (cosign 2 online), the same.
    let logged = serde_json::json!({
        "base64Signature": signature,
        "cert": "",
        "rekorBundle": {"SignedEntryTimestamp": "MEUC", "Payload": {"logIndex": 1}},
    });
    let logged = cosign(&logged.to_string());
    assert_eq!(keys.verify_prehashed(&logged, &sha256(payload)), Ok(keys.ids()[0]));
    // Over other bytes, or by another key: refused, as a `.sig` would be.
    let refused = keys.verify_prehashed(&bundle, &sha256(b"another payload"));
    assert_eq!(refused, Err("no trusted key made this signature".to_owned()));
    let (other_key, _) = openssl_key(dir.path(), "other");
    let by_other = cosign(&cosign2_bundle(&openssl_sign(dir.path(), &other_key, payload)));
    assert!(keys.verify_prehashed(&by_other, &sha256(payload)).is_err());
}

#[test]
fn a_cosign_2_bundle_with_a_garbled_base64_signature_says_which_field() {
    let garbled = parse_signature(cosign2_bundle("not base64!").as_bytes()).expect_err("garbled");
    assert!(garbled.starts_with("base64Signature: not base64"), "{garbled}");
    let not_der = parse_signature(cosign2_bundle("AAAA").as_bytes()).expect_err("not DER");
    assert!(not_der.starts_with("base64Signature: not a DER ECDSA signature"), "{not_der}");
    let number = parse_signature(br#"{"base64Signature": 42}"#).expect_err("not a string");
    assert_eq!(number, "the bundle's base64Signature is not a string");
}

#[test]
fn a_bundle_of_another_shape_is_refused_naming_the_cosign_commands_that_make_accepted_files() {
    let attestation = br#"{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "dsseEnvelope": {"payload": "e30=", "payloadType": "application/vnd.in-toto+json"}}"#;
    let refused = parse_signature(attestation).expect_err("an attestation");
    assert!(refused.starts_with("the bundle holds an attestation (dsseEnvelope)"), "{refused}");
    assert!(refused.ends_with(ACCEPTED_COSIGN_FILES), "{refused}");
    for other in [&br#"{"signature": "MEUC"}"#[..], b"{}", br#"{"messageSignature": {}}"#] {
        let refused = parse_signature(other).expect_err("not a bundle the node reads");
        assert!(refused.ends_with(ACCEPTED_COSIGN_FILES), "{refused}");
    }
    for command in ["cosign sign-blob --key cosign.key --bundle", "--output-signature"] {
        assert!(ACCEPTED_COSIGN_FILES.contains(command), "names `{command}`");
    }
}

#[test]
fn a_bundle_over_the_size_bound_is_refused_before_it_is_parsed() {
    let padding = "x".repeat(MAX_SIGNATURE_BYTES);
    let big = serde_json::json!({"base64Signature": "MEUC", "cert": padding}).to_string();
    let refused = parse_signature(big.as_bytes()).expect_err("too big");
    assert!(refused.ends_with(&format!("bytes, over {MAX_SIGNATURE_BYTES}")), "{refused}");
}

/// Files the real cosign made over the four bytes `test`, offline with a key pair of its own
/// `generate-key-pair`, with the commands of `docs/security.md`: cosign v2.6.5's `.sig`,
/// its bundle and its `--new-bundle-format` bundle, and cosign v3.1.3's `.sig`
/// (`--new-bundle-format=false`), its `--new-bundle-format=false` bundle and its default
/// bundle.
const COSIGN_FILES: [(&str, &str, &str); 6] = [
    ("cosign2.pub", "cosign2.sig", include_str!("cosign-fixtures/cosign2.sig")),
    ("cosign2.pub", "cosign2.bundle", include_str!("cosign-fixtures/cosign2.bundle")),
    ("cosign2.pub", "cosign2.sigstore.json", include_str!("cosign-fixtures/cosign2.sigstore.json")),
    ("cosign3.pub", "cosign3.sig", include_str!("cosign-fixtures/cosign3.sig")),
    ("cosign3.pub", "cosign3.bundle", include_str!("cosign-fixtures/cosign3.bundle")),
    ("cosign3.pub", "cosign3.sigstore.json", include_str!("cosign-fixtures/cosign3.sigstore.json")),
];

#[test]
fn every_file_cosign_2_and_3_sign_blob_writes_verifies_with_its_key_and_only_over_its_payload() {
    let key = |name: &str| match name {
        "cosign2.pub" => include_str!("cosign-fixtures/cosign2.pub"),
        _ => include_str!("cosign-fixtures/cosign3.pub"),
    };
    for (public, file, text) in COSIGN_FILES {
        let keys = TrustedKeys { keys: vec![parse_key(public, key(public)).expect("a key")] };
        let signature = cosign(text);
        let id = keys.ids()[0];
        assert_eq!(keys.verify_prehashed(&signature, &sha256(b"test")), Ok(id), "{file}");
        assert!(keys.verify_prehashed(&signature, &sha256(b"tesT")).is_err(), "{file}");
        let other = if public == "cosign2.pub" { "cosign3.pub" } else { "cosign2.pub" };
        let others = TrustedKeys { keys: vec![parse_key(other, key(other)).expect("a key")] };
        assert!(others.verify_prehashed(&signature, &sha256(b"test")).is_err(), "{file}");
    }
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

/// What the node prints for `error`: the error and its causes.
fn said(error: LoadError) -> String {
    format!("{:#}", anyhow::Error::new(error))
}

/// A keys directory `keys` in `parent` as an administrator makes it: mode 755, holding the
/// minisign test vector's key (mode 644).
fn keys_dir(parent: &Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = parent.join("keys");
    std::fs::create_dir(&dir).expect("keys dir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let key = dir.join("minisign.pub");
    std::fs::write(&key, MINISIGN_KEY).expect("the key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    dir
}

/// The error loading `dir` gives, as the node prints it.
fn refused(dir: &Path) -> String {
    said(TrustedKeys::load(dir).expect_err("refused"))
}

#[test]
fn a_keys_directory_as_an_administrator_makes_it_loads_its_keys() {
    let parent = tempfile::tempdir().expect("tempdir");
    let dir = keys_dir(parent.path());
    assert_eq!(TrustedKeys::load(&dir).expect("the keys").ids().len(), 1);
}

#[test]
fn a_missing_keys_directory_is_an_error_naming_it() {
    let parent = tempfile::tempdir().expect("tempdir");
    let dir = parent.path().join("absent");
    assert_eq!(refused(&dir), format!("--payload-keys {}: no such directory", dir.display()));
}

#[test]
fn a_keys_directory_that_is_a_dangling_symlink_is_missing() {
    let parent = tempfile::tempdir().expect("tempdir");
    let dir = parent.path().join("keys");
    std::os::unix::fs::symlink(parent.path().join("not-mounted-yet"), &dir).expect("symlink");
    assert_eq!(refused(&dir), format!("--payload-keys {}: no such directory", dir.display()));
}

#[test]
fn a_keys_path_that_is_a_file_is_not_a_directory() {
    let parent = tempfile::tempdir().expect("tempdir");
    let file = parent.path().join("cosign.pub");
    std::fs::write(&file, MINISIGN_KEY).expect("file");
    assert_eq!(refused(&file), format!("--payload-keys {}: not a directory", file.display()));
}

#[test]
fn a_keys_directory_that_cannot_be_read_is_an_error_naming_it_and_why() {
    // Below a file: the kernel refuses to look (as it would a directory this user may not
    // search; root may search anything, so the tests take this way).
    let parent = tempfile::tempdir().expect("tempdir");
    std::fs::write(parent.path().join("file"), "").expect("file");
    let dir = parent.path().join("file/keys");
    let error = refused(&dir);
    assert!(
        error.starts_with(&format!("--payload-keys {}: cannot be read: ", dir.display())),
        "{error}"
    );
    assert!(error.contains("os error 20"), "ENOTDIR: {error}");
}

#[test]
fn an_empty_keys_directory_is_an_error_naming_it() {
    let parent = tempfile::tempdir().expect("tempdir");
    let dir = keys_dir(parent.path());
    std::fs::remove_file(dir.join("minisign.pub")).expect("rm");
    assert_eq!(refused(&dir), format!("--payload-keys {}: holds no key file", dir.display()));
}

#[test]
fn a_subdirectory_in_the_keys_directory_is_an_error_naming_it() {
    let parent = tempfile::tempdir().expect("tempdir");
    let dir = keys_dir(parent.path());
    std::fs::create_dir(dir.join("old")).expect("subdirectory");
    assert_eq!(
        refused(&dir),
        format!(
            "--payload-keys {}: {} is a directory, not a key file",
            dir.display(),
            dir.join("old").display()
        )
    );
}

#[test]
fn a_symlink_to_a_directory_in_the_keys_directory_is_an_error_naming_it() {
    let parent = tempfile::tempdir().expect("tempdir");
    let dir = keys_dir(parent.path());
    std::os::unix::fs::symlink(parent.path(), dir.join("up")).expect("symlink");
    let error = refused(&dir);
    assert!(
        error.ends_with(&format!("{} is a directory, not a key file", dir.join("up").display())),
        "{error}"
    );
}

#[test]
fn a_dangling_symlink_in_the_keys_directory_is_an_error_naming_it() {
    let parent = tempfile::tempdir().expect("tempdir");
    let dir = keys_dir(parent.path());
    let link = dir.join("release.pub");
    std::os::unix::fs::symlink(parent.path().join("gone.pub"), &link).expect("symlink");
    assert_eq!(
        refused(&dir),
        format!("--payload-keys {}: {} is a dangling symlink", dir.display(), link.display())
    );
}

#[test]
fn a_socket_in_the_keys_directory_is_an_error_naming_it() {
    let parent = tempfile::tempdir().expect("tempdir");
    let dir = keys_dir(parent.path());
    let socket = dir.join("agent.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).expect("socket");
    assert_eq!(
        refused(&dir),
        format!(
            "--payload-keys {}: {} is not a regular file or a symlink to one",
            dir.display(),
            socket.display()
        )
    );
}

#[test]
fn a_symlink_to_a_key_file_is_a_key() {
    let parent = tempfile::tempdir().expect("tempdir");
    let dir = keys_dir(parent.path());
    let elsewhere = parent.path().join("cosign.pub");
    let (_, public) = openssl_key(parent.path(), "release");
    std::fs::write(&elsewhere, public).expect("the key");
    std::os::unix::fs::symlink(&elsewhere, dir.join("cosign.pub")).expect("symlink");
    assert_eq!(TrustedKeys::load(&dir).expect("both keys").ids().len(), 2);
}

#[test]
fn a_key_file_that_cannot_be_read_is_an_error_naming_it_and_why() {
    let parent = tempfile::tempdir().expect("tempdir");
    let dir = keys_dir(parent.path());
    let garbled = dir.join("release.pub");
    std::fs::write(&garbled, [0xff, 0xfe, 0x00]).expect("file");
    let error = refused(&dir);
    assert!(
        error.starts_with(&format!(
            "--payload-keys {}: {} cannot be read: ",
            dir.display(),
            garbled.display()
        )),
        "{error}"
    );
}

#[test]
fn a_file_in_the_keys_directory_that_is_no_key_is_an_error_naming_it() {
    let parent = tempfile::tempdir().expect("tempdir");
    let dir = keys_dir(parent.path());
    std::fs::write(dir.join("notes.txt"), "remember the milk").expect("file");
    let error = refused(&dir);
    assert!(
        error.starts_with(&format!(
            "--payload-keys {}: {}: neither a PEM public key nor a minisign key",
            dir.display(),
            dir.join("notes.txt").display()
        )),
        "{error}"
    );
}

#[test]
fn a_keys_directory_or_key_writable_by_its_group_or_others_is_an_error_naming_it() {
    use std::os::unix::fs::PermissionsExt as _;
    let parent = tempfile::tempdir().expect("tempdir");
    let dir = keys_dir(parent.path());
    let key = dir.join("minisign.pub");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o664)).expect("chmod");
    assert_eq!(
        refused(&dir),
        format!(
            "--payload-keys {}: {} is writable by its group or others (mode 664)",
            dir.display(),
            key.display()
        )
    );
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    assert_eq!(
        refused(&dir),
        format!(
            "--payload-keys {}: the directory is writable by its group or others (mode 1777)",
            dir.display()
        )
    );
}

#[test]
fn a_keys_directory_or_key_owned_by_another_user_is_an_error_naming_it() {
    // Only root can give a file away; as another user, the pure decision below covers it.
    if !nix::unistd::geteuid().is_root() {
        return;
    }
    let parent = tempfile::tempdir().expect("tempdir");
    let dir = keys_dir(parent.path());
    let key = dir.join("minisign.pub");
    std::os::unix::fs::chown(&key, Some(4242), None).expect("chown");
    assert_eq!(
        refused(&dir),
        format!(
            "--payload-keys {}: {} is owned by uid 4242, not by root or this process's user (0)",
            dir.display(),
            key.display()
        )
    );
    std::os::unix::fs::chown(&key, Some(0), None).expect("chown");
    std::os::unix::fs::chown(&dir, Some(4242), None).expect("chown");
    assert_eq!(
        refused(&dir),
        format!(
            "--payload-keys {}: the directory is owned by uid 4242, not by root or this \
             process's user (0)",
            dir.display()
        )
    );
}

#[test]
fn only_regular_files_of_root_or_this_user_writable_by_their_owner_only_are_keys() {
    use keys_dir::{Kind, directory_problem, entry_refusal};
    let me = 1000;
    // Entries: (kind, owner, mode) → refused why, or trusted.
    assert_eq!(entry_refusal(Kind::File, 0, 0o100_644, me), None);
    assert_eq!(entry_refusal(Kind::File, me, 0o100_600, me), None);
    assert_eq!(entry_refusal(Kind::Directory, 0, 0o040_755, me), Some(Refusal::Directory));
    assert_eq!(entry_refusal(Kind::DanglingLink, 0, 0, me), Some(Refusal::DanglingLink));
    assert_eq!(entry_refusal(Kind::Other, 0, 0o140_755, me), Some(Refusal::NotRegular));
    let Some(Refusal::Untrusted(other)) = entry_refusal(Kind::File, 1001, 0o100_644, me) else {
        panic!("another user's key file is refused");
    };
    assert_eq!(other, "is owned by uid 1001, not by root or this process's user (1000)");
    let Some(Refusal::Untrusted(group)) = entry_refusal(Kind::File, 0, 0o100_664, me) else {
        panic!("a group-writable key file is refused");
    };
    assert_eq!(group, "is writable by its group or others (mode 664)");
    assert!(entry_refusal(Kind::File, me, 0o100_646, me).is_some(), "world-writable");
    // The directory itself.
    assert!(directory_problem(Kind::Directory, 0, 0o040_755, me).is_none());
    assert!(directory_problem(Kind::Directory, me, 0o040_700, me).is_none());
    assert!(matches!(
        directory_problem(Kind::Directory, 1001, 0o040_755, me),
        Some(Problem::UntrustedDirectory(_))
    ));
    assert!(matches!(
        directory_problem(Kind::Directory, 0, 0o040_775, me),
        Some(Problem::UntrustedDirectory(_))
    ));
    assert!(matches!(
        directory_problem(Kind::DanglingLink, 0, 0, me),
        Some(Problem::NoSuchDirectory)
    ));
    assert!(matches!(
        directory_problem(Kind::File, 0, 0o100_644, me),
        Some(Problem::NotADirectory)
    ));
    assert!(matches!(
        directory_problem(Kind::Other, 0, 0o140_755, me),
        Some(Problem::NotADirectory)
    ));
}

#[test]
fn the_default_keys_directory_absent_is_no_keys_and_present_is_checked_like_a_given_one() {
    let parent = tempfile::tempdir().expect("tempdir");
    let dir = parent.path().join("trusted-keys");
    assert!(TrustedKeys::load_default(&dir).expect("absent: no keys").is_none());
    std::fs::create_dir(&dir).expect("mkdir");
    let error = said(TrustedKeys::load_default(&dir).expect_err("an empty directory"));
    assert_eq!(error, format!("--payload-keys {}: holds no key file", dir.display()));
    std::fs::remove_dir(&dir).expect("rmdir");
    std::os::unix::fs::symlink(parent.path().join("gone"), &dir).expect("symlink");
    let error = said(TrustedKeys::load_default(&dir).expect_err("a dangling symlink"));
    assert_eq!(error, format!("--payload-keys {}: no such directory", dir.display()));
    std::fs::remove_file(&dir).expect("rm");
    let dir = keys_dir(parent.path());
    assert_eq!(TrustedKeys::load_default(&dir).expect("keys").map(|k| k.ids().len()), Some(1));
}

#[test]
fn keys_are_required_when_found_refused_all_when_lost_after_being_required() {
    assert_eq!(keys_rule(true, false), KeysRule::Signed, "keys found");
    assert_eq!(keys_rule(true, true), KeysRule::Signed, "keys found again");
    assert_eq!(keys_rule(false, false), KeysRule::Unsigned, "none, never any");
    assert_eq!(keys_rule(false, true), KeysRule::RefuseAll, "none, but the marker");
}

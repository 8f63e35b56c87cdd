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

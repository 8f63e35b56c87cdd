//! Payload signatures (DESIGN §14, issue 24 item 2): the keys a node trusts and the
//! signature formats it accepts. Verification only; no hand-written crypto (RustCrypto
//! `p256` for cosign's ECDSA P-256, `minisign-verify` for minisign's Ed25519).
//!
//! - **Keys** (`--payload-keys DIR`): every file of the directory is one public key: a PEM
//!   `PUBLIC KEY` (cosign's `cosign.pub`, ECDSA P-256) or a minisign public key file. A key's
//!   id is the SHA-256 (hex) of its canonical encoding: the DER SubjectPublicKeyInfo of a
//!   P-256 key, the 42-byte key blob of a minisign key. Nodes publish the ids they require.
//!   A directory given that is missing, empty, unreadable, holds anything but key files or
//!   that others could write stops the node (fail-closed, `keys_dir`).
//! - **Signatures**: cosign `sign-blob`'s `.sig` (base64 of a DER ECDSA-P256-SHA256
//!   signature over the blob), the `messageSignature` of a cosign 3 bundle (its digest must
//!   be the payload's), the `base64Signature` of a cosign 2 bundle (the `.sig`'s text), or a
//!   minisign `.minisig` (prehashed only). Any other bundle is refused with the cosign
//!   commands that make one the node reads ([`ACCEPTED_COSIGN_FILES`]). A cosign signature is checked
//!   against the SHA-256 the download already computed (a prehash, never a second read); a
//!   minisign one needs its own BLAKE2b pass over the same stream ([`Minisign::stream`]).

mod keys_dir;

use std::path::Path;

use base64::Engine as _;
use p256::ecdsa::signature::hazmat::PrehashVerifier as _;
use p256::pkcs8::{DecodePublicKey as _, EncodePublicKey as _};
use sha2::Digest as _;

pub use keys_dir::{LoadError, Problem, Refusal};

/// The file in a node's data directory that says the node once required signed payloads:
/// written (atomically) whenever it starts with at least one trusted key, and never removed
/// by the node. While it exists, a node whose default keys directory is missing refuses
/// every payload ([`keys_rule`]). An administrator who means the node to accept unsigned
/// payloads again removes it.
pub const KEYS_REQUIRED_MARKER: &str = "autopilot-payload-keys-required";

/// What a node requires of payloads, from what it found when it started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeysRule {
    /// It has trusted keys: payloads must be signed by one of them.
    Signed,
    /// No keys, and it never had any: payloads need no signature.
    Unsigned,
    /// No keys, but it required signed payloads before ([`KEYS_REQUIRED_MARKER`]): the keys
    /// were lost (a deleted or not restored keys directory), not dropped on purpose, so
    /// every payload is refused rather than taken unsigned.
    RefuseAll,
}

/// The rule for a node that found keys (`keys_found`) or none, and that did or did not
/// require signed payloads before (`required_before`: the marker exists).
pub fn keys_rule(keys_found: bool, required_before: bool) -> KeysRule {
    match (keys_found, required_before) {
        (true, true | false) => KeysRule::Signed,
        (false, false) => KeysRule::Unsigned,
        (false, true) => KeysRule::RefuseAll,
    }
}

/// One trusted key.
#[derive(Clone, Debug)]
pub struct TrustedKey {
    /// The key's id (hex SHA-256 of its canonical encoding).
    pub id: String,
    /// Where it was read from, for messages.
    pub source: String,
    kind: KeyKind,
}

#[derive(Clone, Debug)]
enum KeyKind {
    Cosign(p256::ecdsa::VerifyingKey),
    Minisign(minisign_verify::PublicKey),
}

/// The keys a node trusts; empty means the node requires no signature.
#[derive(Clone, Debug, Default)]
pub struct TrustedKeys {
    keys: Vec<TrustedKey>,
}

impl TrustedKeys {
    /// Every key in `dir`, a directory an administrator named (`--payload-keys`). `Err`
    /// when the directory is missing, unreadable or empty, holds anything but key files (a
    /// directory, a dangling symlink, a file that is no key), or it or a key is owned by
    /// another user than root or this process's or is writable by its group or others: a
    /// node must not run with fewer keys than its administrator gave it.
    pub fn load(dir: &Path) -> Result<Self, LoadError> {
        keys_dir::read(dir)
            .map(|keys| Self { keys })
            .map_err(|problem| LoadError { dir: dir.to_owned(), problem })
    }

    /// The keys in `dir`, the default directory (`<data-dir>/trusted-keys`): `None` when
    /// nothing is there (no keys: no signature required); once something is, as [`load`].
    ///
    /// [`load`]: Self::load
    pub fn load_default(dir: &Path) -> Result<Option<Self>, LoadError> {
        match std::fs::symlink_metadata(dir) {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            _ => Self::load(dir).map(Some),
        }
    }

    /// The keys' ids, in the order they were read.
    pub fn ids(&self) -> Vec<&str> {
        self.keys.iter().map(|key| key.id.as_str()).collect()
    }

    /// Whether the node requires no signature.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The id of the key that made `signature` over the payload whose SHA-256 is `sha256`
    /// (cosign signatures). `Err` says why none did.
    pub fn verify_prehashed(&self, signature: &Cosign, sha256: &[u8; 32]) -> Result<&str, String> {
        if let Some(digest) = &signature.bundle_digest
            && digest != sha256
        {
            return Err("the bundle's messageDigest is not the payload's sha256".to_owned());
        }
        self.keys
            .iter()
            .find(|key| match &key.kind {
                KeyKind::Cosign(key) => key.verify_prehash(sha256, &signature.signature).is_ok(),
                KeyKind::Minisign(_) => false,
            })
            .map(|key| key.id.as_str())
            .ok_or_else(|| "no trusted key made this signature".to_owned())
    }

    /// The trusted minisign key `signature` names, ready to verify a stream.
    pub fn minisign_key(&self, signature: &Minisign) -> Result<&TrustedKey, String> {
        self.keys
            .iter()
            .find(|key| match &key.kind {
                KeyKind::Minisign(key) => key.verify_stream(&signature.0).is_ok(),
                KeyKind::Cosign(_) => false,
            })
            .ok_or_else(|| "no trusted key made this signature".to_owned())
    }
}

/// A signature a download must carry, and the keys that may have made it.
#[derive(Clone, Copy, Debug)]
pub struct Expected<'a> {
    /// The keys the node trusts.
    pub keys: &'a TrustedKeys,
    /// The signature the Plan gives.
    pub signature: &'a Signature,
}

impl<'a> Expected<'a> {
    /// Start checking a payload: feed it to [`Check::update`] as it arrives, then
    /// [`Check::finish`] with its SHA-256. `Err` when no trusted key can have made the
    /// signature (known before a byte is downloaded for minisign, which names its key).
    pub fn start(self) -> Result<Check<'a>, String> {
        let stream = match self.signature {
            Signature::Cosign(_) => None,
            Signature::Minisign(signature) => {
                let key = self.keys.minisign_key(signature)?;
                let KeyKind::Minisign(public) = &key.kind else {
                    return Err(format!("key {} is not a minisign key", key.id));
                };
                let stream = public
                    .verify_stream(&signature.0)
                    .map_err(|e| format!("the minisign signature cannot be checked: {e}"))?;
                Some((key.id.as_str(), stream))
            }
        };
        Ok(Check { expected: self, stream })
    }
}

/// A signature check under way over one payload stream.
pub struct Check<'a> {
    expected: Expected<'a>,
    /// minisign: the key's id and its BLAKE2b pass over the payload.
    stream: Option<(&'a str, minisign_verify::StreamVerifier<'a>)>,
}

impl Check<'_> {
    /// The next bytes of the payload.
    pub fn update(&mut self, chunk: &[u8]) {
        if let Some((_, stream)) = &mut self.stream {
            stream.update(chunk);
        }
    }

    /// The payload ended with this SHA-256: the id of the trusted key that signed it, or
    /// why it does not verify.
    pub fn finish(self, sha256: &[u8; 32]) -> Result<String, String> {
        match (self.stream, self.expected.signature) {
            (Some((id, mut stream)), _) => stream
                .finalize()
                .map(|()| id.to_owned())
                .map_err(|e| format!("the minisign signature does not verify: {e}")),
            (None, Signature::Cosign(signature)) => {
                self.expected.keys.verify_prehashed(signature, sha256).map(str::to_owned)
            }
            (None, Signature::Minisign(_)) => {
                Err("the minisign signature was not checked over the payload".to_owned())
            }
        }
    }
}

/// Parse one key file; `source` names it in errors.
pub fn parse_key(source: &str, text: &str) -> Result<TrustedKey, String> {
    let trimmed = text.trim();
    if trimmed.starts_with("-----BEGIN PUBLIC KEY-----") {
        let key = p256::ecdsa::VerifyingKey::from_public_key_pem(trimmed)
            .map_err(|e| format!("{source}: not an ECDSA P-256 public key: {e}"))?;
        let der = key.to_public_key_der().map_err(|e| format!("{source}: {e}"))?;
        let id = hex::encode(sha2::Sha256::digest(der.as_bytes()));
        return Ok(TrustedKey { id, source: source.to_owned(), kind: KeyKind::Cosign(key) });
    }
    // A minisign public key file: an optional `untrusted comment:` line, then the key.
    let line = trimmed.lines().rfind(|l| !l.trim().is_empty()).unwrap_or_default().trim();
    let key = minisign_verify::PublicKey::from_base64(line)
        .map_err(|e| format!("{source}: neither a PEM public key nor a minisign key: {e}"))?;
    let blob = base64::engine::general_purpose::STANDARD
        .decode(line)
        .map_err(|e| format!("{source}: {e}"))?;
    let id = hex::encode(sha2::Sha256::digest(&blob));
    Ok(TrustedKey { id, source: source.to_owned(), kind: KeyKind::Minisign(key) })
}

/// A cosign signature: from a `.sig` file or a bundle.
#[derive(Clone, Debug)]
pub struct Cosign {
    signature: p256::ecdsa::Signature,
    /// The digest a bundle says it signed (it must be the payload's).
    bundle_digest: Option<[u8; 32]>,
}

/// A minisign signature (prehashed).
#[derive(Clone)]
pub struct Minisign(minisign_verify::Signature);

impl std::fmt::Debug for Minisign {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Minisign").field(&self.0.trusted_comment()).finish()
    }
}

/// A signature file in one of the accepted formats.
#[derive(Clone, Debug)]
pub enum Signature {
    /// cosign `.sig` or bundle.
    Cosign(Cosign),
    /// minisign `.minisig`.
    Minisign(Minisign),
}

/// The longest signature file read (a bundle with its certificate chain and log entry is a
/// few KiB).
pub const MAX_SIGNATURE_BYTES: usize = 64 * 1024;

/// Parse a signature file. `Err` says what it is not.
pub fn parse_signature(bytes: &[u8]) -> Result<Signature, String> {
    if bytes.len() > MAX_SIGNATURE_BYTES {
        return Err(format!("the signature is {} bytes, over {MAX_SIGNATURE_BYTES}", bytes.len()));
    }
    let text = std::str::from_utf8(bytes).map_err(|_| "the signature is not text".to_owned())?;
    let trimmed = text.trim();
    if trimmed.starts_with("untrusted comment:") {
        let signature = minisign_verify::Signature::decode(trimmed)
            .map_err(|e| format!("not a minisign signature: {e}"))?;
        return Ok(Signature::Minisign(Minisign(signature)));
    }
    if trimmed.starts_with('{') {
        return parse_bundle(trimmed).map(Signature::Cosign);
    }
    let signature = parse_der(trimmed)?;
    Ok(Signature::Cosign(Cosign { signature, bundle_digest: None }))
}

/// What a bundle the node cannot read is told: which cosign commands make files it reads
/// (the offline flags are those `docs/security.md` gives, tried with cosign 2.6 and 3.1).
pub const ACCEPTED_COSIGN_FILES: &str = "the node reads the bundle of `cosign sign-blob --key \
     cosign.key --bundle k0s.bundle k0s` (cosign 2 or 3) and the `.sig` of `--output-signature \
     k0s.sig`; offline, add `--tlog-upload=false` (cosign 2) or `--use-signing-config=false \
     --tlog-upload=false` (cosign 3), see docs/security.md";

/// A cosign bundle: cosign 3's protobuf-JSON bundle (`messageSignature`: the signature and
/// the digest it was made over) or cosign 2's `sign-blob --bundle` file (`base64Signature`,
/// the `.sig`'s text, beside an optional certificate and transparency-log entry that a node
/// with keys does not need). Either signature is checked exactly like a `.sig`.
fn parse_bundle(text: &str) -> Result<Cosign, String> {
    let bundle: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not a cosign bundle: {e}"))?;
    let message = &bundle["messageSignature"];
    if !message.is_null() {
        return parse_message_signature(message);
    }
    if let Some(signature) = bundle.get("base64Signature") {
        let signature = signature.as_str().ok_or("the bundle's base64Signature is not a string")?;
        let signature = parse_der(signature).map_err(|e| format!("base64Signature: {e}"))?;
        return Ok(Cosign { signature, bundle_digest: None });
    }
    let what = if bundle.get("dsseEnvelope").is_some() {
        "the bundle holds an attestation (dsseEnvelope), not a signature of the payload"
    } else {
        "the bundle has neither messageSignature (cosign 3) nor base64Signature (cosign 2)"
    };
    Err(format!("{what}: {ACCEPTED_COSIGN_FILES}"))
}

/// A cosign 3 bundle's `messageSignature`: the signature, and the SHA-256 it says it signed.
fn parse_message_signature(message: &serde_json::Value) -> Result<Cosign, String> {
    let signature = message["signature"].as_str().ok_or_else(|| {
        format!("the bundle has no messageSignature.signature: {ACCEPTED_COSIGN_FILES}")
    })?;
    let signature = parse_der(signature).map_err(|e| format!("messageSignature.signature: {e}"))?;
    let bundle_digest = match message["messageDigest"]["digest"].as_str() {
        None => None,
        Some(digest) => {
            if message["messageDigest"]["algorithm"].as_str() != Some("SHA2_256") {
                return Err("the bundle's messageDigest is not SHA2_256".to_owned());
            }
            let b64 = base64::engine::general_purpose::STANDARD;
            let bytes = b64.decode(digest).map_err(|e| format!("messageDigest.digest: {e}"))?;
            Some(bytes.try_into().map_err(|_| "messageDigest.digest is not 32 bytes")?)
        }
    };
    Ok(Cosign { signature, bundle_digest })
}

/// Base64 of a DER ECDSA signature (a `.sig`'s text).
fn parse_der(text: &str) -> Result<p256::ecdsa::Signature, String> {
    let der = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| format!("not base64: {e}"))?;
    p256::ecdsa::Signature::from_der(&der).map_err(|e| format!("not a DER ECDSA signature: {e}"))
}

#[cfg(test)]
mod tests;

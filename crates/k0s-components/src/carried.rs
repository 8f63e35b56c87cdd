//! The component set a `k0s` binary carries: compressed component binaries appended to the
//! executable, a manifest naming each (name, version, sha256, size) and a trailer that finds
//! the manifest from the end of the file.
//!
//! ```text
//! [ the k0s executable ][ zstd(component 1) ]…[ zstd(component n) ][ manifest (JSON) ][ len: u64 LE ][ "K0SCSET1" ]
//! ```
//!
//! The set is part of the one release file, so the Plan's sha256 and the payload signature
//! cover it as they cover the executable; packing is a step of its own ([`pack`]: `cargo
//! xtask dist`, the test harness), so two releases differ in their set without two Rust
//! builds. A build with nothing appended carries nothing ([`read`] gives `None`).
//!
//! Everything read from the file is bounded before it is used: the manifest's length, the
//! number of components, their names and versions, and each component's offsets within the
//! file; a component is only ever written out after its decompressed bytes matched the
//! manifest's size and sha256 ([`crate::stage`]).

use std::{
    fs::File,
    io::{self, Read, Seek, SeekFrom, Write},
    path::Path,
};

use anyhow::{Context as _, bail, ensure};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// The last 8 bytes of a file that carries a component set.
pub const MAGIC: &[u8; 8] = b"K0SCSET1";

/// The manifest's format version.
const FORMAT: u32 = 1;

/// The trailer: the manifest's length (u64, little endian) and [`MAGIC`].
const TRAILER_LEN: u64 = 16;

/// The longest manifest read (a few hundred bytes per component).
const MAX_MANIFEST_LEN: u64 = 64 * 1024;

/// The most components one set holds.
const MAX_COMPONENTS: usize = 32;

/// The largest component (decompressed).
pub const MAX_COMPONENT_SIZE: u64 = 2 * 1024 * 1024 * 1024;

/// The zstd level [`pack`] compresses with (fast to pack, about a third of the size).
const LEVEL: i32 = 3;

/// One carried component, as the manifest names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Component {
    /// Its file name in `<data-dir>/bin/` (e.g. `kubelet`).
    pub name: String,
    /// The version it reports (e.g. `v1.35.4`).
    pub version: String,
    /// The sha256 of the decompressed binary, lower-case hex.
    pub sha256: String,
    /// The decompressed size in bytes.
    pub size: u64,
    /// Where its compressed bytes start in the file.
    offset: u64,
    /// How many compressed bytes it has.
    compressed_size: u64,
}

/// The manifest as written into the file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Manifest {
    format: u32,
    /// The length of the executable before anything was appended.
    base_length: u64,
    components: Vec<Component>,
}

/// The set a file carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CarriedSet {
    /// The components, in the order they were packed.
    pub components: Vec<Component>,
    /// The length of the executable before the set.
    pub base_length: u64,
}

impl CarriedSet {
    /// The component named `name`, if carried.
    pub fn get(&self, name: &str) -> Option<&Component> {
        self.components.iter().find(|c| c.name == name)
    }

    /// Writes component `component`'s decompressed bytes (read from `file`, the file this set
    /// was read from) to `out`, checking them against its size and sha256; returns the bytes
    /// written. Stops at `size + 1` bytes, so a component that inflates past its size costs
    /// no more than that. `decompressor` is the one context of the whole staging.
    pub fn extract(
        &self,
        file: &mut File,
        component: &Component,
        out: &mut impl Write,
        decompressor: &mut Decompressor,
    ) -> anyhow::Result<u64> {
        file.seek(SeekFrom::Start(component.offset))?;
        let compressed = io::BufReader::with_capacity(
            READ_BUFFER,
            Read::take(&mut *file, component.compressed_size),
        );
        let decoder = zstd::stream::read::Decoder::with_context(compressed, &mut decompressor.0)
            .take(component.size + 1);
        let mut hashing = HashingWriter { inner: out, hasher: Sha256::new(), written: 0 };
        io::copy(&mut { decoder }, &mut hashing).context("decompressing")?;
        let HashingWriter { hasher, written, .. } = hashing;
        ensure!(
            written == component.size,
            "{} decompresses to {written} bytes, the manifest says {}",
            component.name,
            component.size
        );
        let digest = hex::encode(hasher.finalize());
        ensure!(
            digest == component.sha256,
            "{} decompresses to sha256 {digest}, the manifest says {}",
            component.name,
            component.sha256
        );
        Ok(written)
    }
}

/// The buffer compressed bytes are read through, and a file is hashed with: under glibc's
/// first threshold for serving an allocation from its own mapping (128 KiB), so it is taken
/// from and given back to the heap like any small buffer.
const READ_BUFFER: usize = 64 * 1024;

/// The decompression context of one staging, used for each component in turn.
///
/// zstd's stream decoder allocates a window buffer (2.4 MiB for what [`pack`] writes) at the
/// first frame it decodes. A decoder made anew for each component allocates and frees that
/// buffer once per component, and glibc, which gives the first one a mapping of its own,
/// raises its mapping threshold above its size when it is freed, so the next ones are carved
/// from the staging thread's heap and stay resident for the life of the process after the
/// staging (2.6 MiB of a worker's RSS). One context for all of them allocates the buffer once
/// and unmaps it when it is dropped, at the end of the staging.
pub struct Decompressor(zstd::zstd_safe::DCtx<'static>);

impl Decompressor {
    /// A new context (its buffers are allocated at the first frame).
    pub fn new() -> anyhow::Result<Self> {
        zstd::zstd_safe::DCtx::try_create()
            .map(Self)
            .context("zstd could not allocate a decompression context")
    }
}

/// A writer that hashes and counts what passes through it.
struct HashingWriter<'a, W> {
    inner: &'a mut W,
    hasher: Sha256,
    written: u64,
}

impl<W: Write> Write for HashingWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The set `file` carries, or `None` when nothing is appended to it. A file whose trailer
/// is there but whose manifest is not valid is an error.
pub fn read(file: &mut File) -> anyhow::Result<Option<CarriedSet>> {
    let len = file.metadata().context("reading the file's size")?.len();
    if len < TRAILER_LEN {
        return Ok(None);
    }
    let mut trailer = [0u8; TRAILER_LEN as usize];
    file.seek(SeekFrom::Start(len - TRAILER_LEN))?;
    file.read_exact(&mut trailer)?;
    let (manifest_len, magic) = trailer.split_at(8);
    if magic != MAGIC {
        return Ok(None);
    }
    let manifest_len = u64::from_le_bytes(manifest_len.try_into().context("trailer")?);
    ensure!(
        manifest_len <= MAX_MANIFEST_LEN && manifest_len <= len - TRAILER_LEN,
        "the component manifest claims {manifest_len} bytes (at most {MAX_MANIFEST_LEN}, within \
         the file's {len})"
    );
    let manifest_at = len - TRAILER_LEN - manifest_len;
    let mut text = vec![0u8; usize::try_from(manifest_len)?];
    file.seek(SeekFrom::Start(manifest_at))?;
    file.read_exact(&mut text)?;
    let manifest: Manifest =
        serde_json::from_slice(&text).context("the component manifest is not valid")?;
    check(&manifest, manifest_at)?;
    Ok(Some(CarriedSet { components: manifest.components, base_length: manifest.base_length }))
}

/// The set the running executable carries (`/proc/self/exe`: the file this process runs,
/// even after an update renamed another one over its path).
pub fn of_this_process() -> anyhow::Result<(Option<CarriedSet>, File)> {
    let mut file = File::open("/proc/self/exe").context("opening /proc/self/exe")?;
    let set = read(&mut file).context("reading the component set of this binary")?;
    Ok((set, file))
}

/// Checks what the manifest says against the file it came from (`manifest_at`: where the
/// manifest starts, so where the components must end).
fn check(manifest: &Manifest, manifest_at: u64) -> anyhow::Result<()> {
    ensure!(
        manifest.format == FORMAT,
        "component manifest format {} (this binary reads {FORMAT})",
        manifest.format
    );
    ensure!(
        manifest.components.len() <= MAX_COMPONENTS,
        "{} components (at most {MAX_COMPONENTS})",
        manifest.components.len()
    );
    let mut next = manifest.base_length;
    for (i, c) in manifest.components.iter().enumerate() {
        check_name(&c.name).with_context(|| format!("component {i}"))?;
        ensure!(
            !c.version.is_empty()
                && c.version.len() <= 64
                && c.version.bytes().all(|b| b.is_ascii_graphic()),
            "component {}: version {:?} is not 1 to 64 printable characters",
            c.name,
            c.version
        );
        ensure!(
            c.sha256.len() == 64
                && c.sha256.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
            "component {}: sha256 {:?} is not 64 lower-case hex digits",
            c.name,
            c.sha256
        );
        ensure!(
            c.size <= MAX_COMPONENT_SIZE,
            "component {}: {} bytes (at most {MAX_COMPONENT_SIZE})",
            c.name,
            c.size
        );
        let end = c.offset.checked_add(c.compressed_size);
        ensure!(
            c.offset == next && end.is_some_and(|end| end <= manifest_at),
            "component {}: bytes {}+{} are not where the previous component ends ({next}) and \
             before the manifest ({manifest_at})",
            c.name,
            c.offset,
            c.compressed_size
        );
        ensure!(
            manifest.components[..i].iter().all(|other| other.name != c.name),
            "component {} is carried twice",
            c.name
        );
        next = end.unwrap_or(manifest_at);
    }
    ensure!(
        next == manifest_at,
        "{} bytes between the last component and the manifest",
        manifest_at - next
    );
    Ok(())
}

/// A component name: 1 to 63 of `a-z 0-9 . _ -`, starting with a letter or digit (it becomes
/// a file name in `<data-dir>/bin/`).
pub fn check_name(name: &str) -> anyhow::Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.bytes().next().is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b));
    if !ok {
        bail!("{name:?} is not a component name (1 to 63 of a-z 0-9 . _ -)");
    }
    Ok(())
}

/// A component to pack: its name, the version it reports and where it is.
#[derive(Clone, Debug)]
pub struct Source<'a> {
    /// Its file name in `<data-dir>/bin/`.
    pub name: &'a str,
    /// The version it reports.
    pub version: &'a str,
    /// The binary.
    pub path: &'a Path,
}

/// Writes `out`: the executable `binary` (without any set it already carries) followed by
/// `sources`, compressed, and their manifest. Written to a temporary file beside `out` and
/// renamed over it, so `out` is never half-written. Returns the set as a reader sees it.
pub fn pack(binary: &Path, sources: &[Source<'_>], out: &Path) -> anyhow::Result<CarriedSet> {
    ensure!(sources.len() <= MAX_COMPONENTS, "at most {MAX_COMPONENTS} components");
    let mut input = File::open(binary).with_context(|| format!("opening {}", binary.display()))?;
    let base_length = match read(&mut input)? {
        Some(set) => set.base_length,
        None => input.metadata()?.len(),
    };
    let dir = out.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".k0s-pack-")
        .tempfile_in(dir)
        .with_context(|| format!("creating a temporary file in {}", dir.display()))?;
    input.seek(SeekFrom::Start(0))?;
    io::copy(&mut Read::take(&mut input, base_length), tmp.as_file_mut())
        .with_context(|| format!("copying {}", binary.display()))?;
    let mut offset = base_length;
    let mut components = Vec::new();
    for source in sources {
        check_name(source.name)?;
        let mut file = File::open(source.path).with_context(|| {
            format!("opening component {} at {}", source.name, source.path.display())
        })?;
        let size = file.metadata()?.len();
        ensure!(
            size <= MAX_COMPONENT_SIZE,
            "{} is larger than {MAX_COMPONENT_SIZE} bytes",
            source.path.display()
        );
        let sha256 = sha256_of(source.path)?;
        let mut counting = CountingWriter { inner: tmp.as_file_mut(), written: 0 };
        zstd::stream::copy_encode(&mut file, &mut counting, LEVEL)
            .with_context(|| format!("compressing {}", source.path.display()))?;
        let compressed_size = counting.written;
        components.push(Component {
            name: source.name.to_owned(),
            version: source.version.to_owned(),
            sha256,
            size,
            offset,
            compressed_size,
        });
        offset += compressed_size;
    }
    let manifest = Manifest { format: FORMAT, base_length, components };
    let text = serde_json::to_vec(&manifest)?;
    let file = tmp.as_file_mut();
    file.write_all(&text)?;
    file.write_all(&(text.len() as u64).to_le_bytes())?;
    file.write_all(MAGIC)?;
    file.sync_all()?;
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    file.set_permissions(mode)?;
    tmp.persist(out).with_context(|| format!("writing {}", out.display()))?;
    let set = read(&mut File::open(out)?)?.context("the packed file carries no set")?;
    Ok(set)
}

/// The sha256 of a file, lower-case hex.
pub fn sha256_of(path: &Path) -> anyhow::Result<String> {
    let mut file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; READ_BUFFER];
    loop {
        let n = file.read(&mut buf).with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// A writer that counts what passes through it.
struct CountingWriter<'a, W> {
    inner: &'a mut W,
    written: u64,
}

impl<W: Write> Write for CountingWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn packed(dir: &Path, parts: &[(&str, &[u8])]) -> (std::path::PathBuf, CarriedSet) {
        let binary = dir.join("k0s-bare");
        std::fs::write(&binary, b"\x7fELF pretend executable").unwrap();
        let mut sources = Vec::new();
        for (name, bytes) in parts {
            let path = dir.join(format!("src-{name}"));
            std::fs::write(&path, bytes).unwrap();
            sources.push(path);
        }
        let sources: Vec<Source<'_>> = parts
            .iter()
            .zip(&sources)
            .map(|((name, _), path)| Source { name, version: "v1.35.4", path })
            .collect();
        let out = dir.join("k0s");
        let set = pack(&binary, &sources, &out).unwrap();
        (out, set)
    }

    #[test]
    fn a_packed_file_lists_its_components_and_gives_back_their_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let big = vec![7u8; 300_000];
        let (out, set) = packed(dir.path(), &[("kubelet", b"kubelet bytes"), ("containerd", &big)]);
        let names: Vec<&str> = set.components.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["kubelet", "containerd"]);
        let kubelet = set.get("kubelet").unwrap();
        assert_eq!(kubelet.sha256, hex::encode(Sha256::digest(b"kubelet bytes")));
        assert_eq!(kubelet.version, "v1.35.4");
        let mut file = File::open(&out).unwrap();
        assert_eq!(read(&mut file).unwrap().as_ref(), Some(&set));
        // One context for them all, as a staging uses it.
        let mut decompressor = Decompressor::new().unwrap();
        for (name, expected) in
            [("containerd", &big[..]), ("kubelet", b"kubelet bytes"), ("containerd", &big[..])]
        {
            let mut bytes = Vec::new();
            set.extract(&mut file, set.get(name).unwrap(), &mut bytes, &mut decompressor).unwrap();
            assert_eq!(bytes, expected, "{name}");
        }
        // The executable itself is unchanged at the start of the file.
        let whole = std::fs::read(&out).unwrap();
        assert!(whole.starts_with(b"\x7fELF pretend executable"));
        assert!(whole.len() < big.len(), "compressed");
    }

    #[test]
    fn a_bare_build_carries_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k0s");
        std::fs::write(&path, b"\x7fELF only").unwrap();
        assert_eq!(read(&mut File::open(&path).unwrap()).unwrap(), None);
    }

    #[test]
    fn packing_a_carrying_binary_again_replaces_its_set() {
        let dir = tempfile::tempdir().unwrap();
        let (first, _) = packed(dir.path(), &[("kubelet", b"old")]);
        let again = dir.path().join("again");
        std::fs::write(dir.path().join("new"), b"new kubelet").unwrap();
        let sources =
            [Source { name: "kubelet", version: "v1.35.5", path: &dir.path().join("new") }];
        let set = pack(&first, &sources, &again).unwrap();
        assert_eq!(set.components.len(), 1);
        assert_eq!(set.get("kubelet").unwrap().version, "v1.35.5");
        assert_eq!(set.base_length, b"\x7fELF pretend executable".len() as u64);
    }

    #[test]
    fn a_manifest_that_points_outside_its_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k0s");
        let manifest = serde_json::json!({
            "format": 1, "baseLength": 4,
            "components": [{ "name": "kubelet", "version": "v1", "sha256": "a".repeat(64),
                "size": 10, "offset": 4, "compressedSize": 1_000_000 }],
        })
        .to_string();
        let mut bytes = b"ELF!".to_vec();
        bytes.extend_from_slice(manifest.as_bytes());
        bytes.extend_from_slice(&(manifest.len() as u64).to_le_bytes());
        bytes.extend_from_slice(MAGIC);
        std::fs::write(&path, bytes).unwrap();
        let err = read(&mut File::open(&path).unwrap()).unwrap_err();
        assert!(format!("{err:#}").contains("component kubelet: bytes 4+1000000"), "{err:#}");
    }

    #[test]
    fn a_name_that_is_not_a_plain_file_name_is_refused() {
        for bad in ["", "../kubelet", "bin/kubelet", "Kubelet", ".hidden", &"k".repeat(64)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        for good in ["kubelet", "containerd-shim-runc-v2", "kube-apiserver"] {
            check_name(good).unwrap();
        }
    }

    #[test]
    fn a_context_left_in_the_middle_of_a_frame_decodes_the_next_component_whole() {
        let dir = tempfile::tempdir().unwrap();
        let big: Vec<u8> = (0..400_000u32).map(|i| (i % 251) as u8).collect();
        let (out, mut set) = packed(dir.path(), &[("containerd", &big), ("kubelet", b"kubelet")]);
        let mut file = File::open(&out).unwrap();
        let mut decompressor = Decompressor::new().unwrap();
        // A manifest that says less than the frame holds stops the decoding mid-frame.
        set.components[0].size = 1000;
        let short = set.components[0].clone();
        let err = set.extract(&mut file, &short, &mut Vec::new(), &mut decompressor).unwrap_err();
        assert!(err.to_string().contains("decompresses to 1001 bytes"), "{err:#}");
        let mut bytes = Vec::new();
        set.extract(&mut file, set.get("kubelet").unwrap(), &mut bytes, &mut decompressor).unwrap();
        assert_eq!(bytes, b"kubelet");
    }

    #[test]
    fn a_component_whose_bytes_do_not_match_the_manifest_is_not_written_as_valid() {
        let dir = tempfile::tempdir().unwrap();
        let (out, mut set) = packed(dir.path(), &[("kubelet", b"kubelet bytes")]);
        set.components[0].sha256 = "0".repeat(64);
        let mut sink = Vec::new();
        let err = set
            .extract(
                &mut File::open(&out).unwrap(),
                &set.components[0].clone(),
                &mut sink,
                &mut Decompressor::new().unwrap(),
            )
            .unwrap_err();
        assert!(err.to_string().contains("the manifest says 0000"), "{err:#}");
    }
}

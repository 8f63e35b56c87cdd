//! The real nodes' local images, written by the harness (no registry): docker-archive
//! tarballs (`manifest.json`, an image config, one layer) that `ctr images import` reads.
//!
//! Both images hold one layer: the machine's static busybox with a link per applet, and an
//! `/etc/passwd` and `/etc/group`. [`BUSYBOX_IMAGE`] runs whatever a Pod says;
//! [`PAUSE_IMAGE`], the sandbox of every Pod, is a shell that waits until it is told to stop.

use std::{fs, io::Write as _, path::Path, process::Command};

use anyhow::{Context as _, bail, ensure};
use sha2::{Digest as _, Sha256};

/// The image Pods of the real-node scenarios run (`imagePullPolicy: Never`).
pub const BUSYBOX_IMAGE: &str = "localhost/k0s-it/busybox:1";

/// The sandbox image of every real node.
pub const PAUSE_IMAGE: &str = "localhost/k0s-it/pause:1";

/// Where Debian's `busybox-static` installs the static busybox.
pub const BUSYBOX: &str = "/bin/busybox";

/// The sandbox's command: wait, reaping what it started, until SIGTERM or SIGINT.
const PAUSE_COMMAND: &str = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done";

/// Writes the two images as docker-archive tarballs into `dir` and returns their paths
/// (busybox, pause).
/// The file name of the busybox image's archive in the nodes' directory.
pub(crate) const BUSYBOX_ARCHIVE: &str = "busybox.tar";

/// The file name of the pause image's archive in the nodes' directory.
pub(crate) const PAUSE_ARCHIVE: &str = "pause.tar";

pub(crate) fn write_images(dir: &Path) -> anyhow::Result<[std::path::PathBuf; 2]> {
    let busybox = fs::read(BUSYBOX).with_context(|| {
        format!("reading {BUSYBOX} (the Debian package busybox-static installs it)")
    })?;
    let applets = applets()?;
    let layer = layer(&busybox, &applets)?;
    let busybox_path = dir.join(BUSYBOX_ARCHIVE);
    let pause_path = dir.join(PAUSE_ARCHIVE);
    fs::write(&busybox_path, archive(&layer, BUSYBOX_IMAGE, &[], &["/bin/sh"])?)?;
    fs::write(&pause_path, archive(&layer, PAUSE_IMAGE, &["/bin/sh", "-c", PAUSE_COMMAND], &[])?)?;
    Ok([busybox_path, pause_path])
}

/// The applets the machine's busybox has (`busybox --list`).
fn applets() -> anyhow::Result<Vec<String>> {
    let output = Command::new(BUSYBOX).arg("--list").output().context("running busybox --list")?;
    ensure!(output.status.success(), "busybox --list failed: {}", output.status);
    let list: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::trim)
        .filter(|a| !a.is_empty() && !a.contains('/') && *a != "busybox")
        .map(str::to_owned)
        .collect();
    ensure!(list.iter().any(|a| a == "sh"), "{BUSYBOX} has no sh applet");
    Ok(list)
}

/// The layer: `/bin/busybox`, `/bin/<applet>` links to it, `/etc/passwd`, `/etc/group`,
/// `/tmp`, `/root`.
fn layer(busybox: &[u8], applets: &[String]) -> anyhow::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    for (dir, mode) in [("bin", 0o755), ("etc", 0o755), ("root", 0o700), ("tmp", 0o1777)] {
        let mut header = new_header(tar::EntryType::Directory, mode, 0);
        tar.append_data(&mut header, dir, std::io::empty())?;
    }
    let mut header = new_header(tar::EntryType::Regular, 0o755, busybox.len());
    tar.append_data(&mut header, "bin/busybox", busybox)?;
    for applet in applets {
        let mut header = new_header(tar::EntryType::Symlink, 0o777, 0);
        tar.append_link(&mut header, format!("bin/{applet}"), "busybox")?;
    }
    let passwd = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n";
    let group = "root:x:0:\nnogroup:x:65534:\n";
    for (path, contents) in [("etc/passwd", passwd), ("etc/group", group)] {
        let mut header = new_header(tar::EntryType::Regular, 0o644, contents.len());
        tar.append_data(&mut header, path, contents.as_bytes())?;
    }
    Ok(tar.into_inner()?)
}

fn new_header(kind: tar::EntryType, mode: u32, size: usize) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_size(size as u64);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(0);
    header
}

/// A docker-archive of one image: `layer` under the tag `reference`.
fn archive(
    layer: &[u8],
    reference: &str,
    entrypoint: &[&str],
    cmd: &[&str],
) -> anyhow::Result<Vec<u8>> {
    let layer_digest = hex::encode(Sha256::digest(layer));
    let config = serde_json::json!({
        "architecture": go_arch()?,
        "os": "linux",
        "config": {
            "Env": ["PATH=/bin"],
            "Entrypoint": if entrypoint.is_empty() { None } else { Some(entrypoint) },
            "Cmd": if cmd.is_empty() { None } else { Some(cmd) },
            "WorkingDir": "/",
        },
        "rootfs": { "type": "layers", "diff_ids": [format!("sha256:{layer_digest}")] },
        "history": [{ "created_by": "k0s autopilot test harness" }],
    })
    .to_string();
    let config_name = format!("{}.json", hex::encode(Sha256::digest(config.as_bytes())));
    let layer_name = format!("{layer_digest}/layer.tar");
    let manifest = serde_json::json!([{
        "Config": config_name,
        "RepoTags": [reference],
        "Layers": [layer_name],
    }])
    .to_string();

    let mut tar = tar::Builder::new(Vec::new());
    let mut header = new_header(tar::EntryType::Directory, 0o755, 0);
    tar.append_data(&mut header, layer_digest, std::io::empty())?;
    for (name, contents) in [
        (layer_name.as_str(), layer),
        (config_name.as_str(), config.as_bytes()),
        ("manifest.json", manifest.as_bytes()),
    ] {
        let mut header = new_header(tar::EntryType::Regular, 0o644, contents.len());
        tar.append_data(&mut header, name, contents)?;
    }
    let mut bytes = tar.into_inner()?;
    bytes.flush()?;
    Ok(bytes)
}

/// The Go name of this machine's architecture (what the image config says it runs on).
fn go_arch() -> anyhow::Result<&'static str> {
    match std::env::consts::ARCH {
        "x86_64" => Ok("amd64"),
        "aarch64" => Ok("arm64"),
        other => bail!("no Go architecture name known for {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(tar_bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
        let mut archive = tar::Archive::new(tar_bytes);
        archive
            .entries()
            .unwrap()
            .map(|e| {
                let mut e = e.unwrap();
                let path = e.path().unwrap().to_string_lossy().into_owned();
                let mut data = Vec::new();
                std::io::Read::read_to_end(&mut e, &mut data).unwrap();
                (path, data)
            })
            .collect()
    }

    #[test]
    fn the_archive_names_its_layer_by_digest_and_tags_the_image() {
        let layer = layer(b"#!binary", &["sh".to_owned(), "sleep".to_owned()]).unwrap();
        let bytes = archive(&layer, "localhost/x:1", &[], &["/bin/sh"]).unwrap();
        let files = entries(&bytes);
        let manifest = &files.iter().find(|(p, _)| p == "manifest.json").unwrap().1;
        let manifest: serde_json::Value = serde_json::from_slice(manifest).unwrap();
        assert_eq!(manifest[0]["RepoTags"][0], "localhost/x:1");
        let layer_name = manifest[0]["Layers"][0].as_str().unwrap();
        let stored = &files.iter().find(|(p, _)| p == layer_name).unwrap().1;
        assert_eq!(stored, &layer);
        let digest = hex::encode(Sha256::digest(&layer));
        assert!(layer_name.starts_with(&digest));
        let config_name = manifest[0]["Config"].as_str().unwrap();
        let config = &files.iter().find(|(p, _)| p == config_name).unwrap().1;
        let config: serde_json::Value = serde_json::from_slice(config).unwrap();
        assert_eq!(config["rootfs"]["diff_ids"][0], format!("sha256:{digest}"));
        assert_eq!(config["config"]["Cmd"][0], "/bin/sh");
        assert!(config["config"]["Entrypoint"].is_null());
    }

    #[test]
    fn the_layer_links_every_applet_to_busybox() {
        let layer = layer(b"#!binary", &["sh".to_owned(), "sleep".to_owned()]).unwrap();
        let mut archive = tar::Archive::new(layer.as_slice());
        let links: Vec<(String, String)> = archive
            .entries()
            .unwrap()
            .filter_map(|e| {
                let e = e.unwrap();
                let target = e.link_name().unwrap()?.to_string_lossy().into_owned();
                Some((e.path().unwrap().to_string_lossy().into_owned(), target))
            })
            .collect();
        assert_eq!(
            links,
            [
                ("bin/sh".to_owned(), "busybox".to_owned()),
                ("bin/sleep".to_owned(), "busybox".to_owned())
            ]
        );
    }
}

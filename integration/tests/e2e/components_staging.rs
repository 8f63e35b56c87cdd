//! Staging the carried components (`k0s_components::stage`) onto a disk that fills up: the
//! start fails naming the component and the path, the previous file stays whole and usable,
//! and nothing half-written is left (a small tmpfs stands in for the full disk; needs root,
//! as every disk-full scenario does).

use std::io::Read as _;

use integration::disk::SmallFilesystem;
use k0s_components::{carried, stage};

#[test]
fn a_full_disk_fails_staging_naming_the_component_and_keeps_the_previous_file() {
    assert!(SmallFilesystem::can_mount(), "the disk-full scenarios run as root");
    let work = tempfile::tempdir().unwrap();
    // A 3 MiB kubelet that does not compress, packed onto a pretend executable.
    let mut bytes = vec![0u8; 3 << 20];
    std::fs::File::open("/dev/urandom").unwrap().read_exact(&mut bytes).unwrap();
    let kubelet = work.path().join("kubelet-new");
    std::fs::write(&kubelet, &bytes).unwrap();
    let base = work.path().join("bare");
    std::fs::write(&base, b"\x7fELF").unwrap();
    let packed = work.path().join("k0s");
    let sources = [carried::Source { name: "kubelet", version: "v1.35.4", path: &kubelet }];
    let set = carried::pack(&base, &sources, &packed).unwrap();

    // The data directory's bin/ on a 1 MiB filesystem, holding the previous kubelet.
    let disk = SmallFilesystem::mount(work.path().join("bin"), 1 << 20).unwrap();
    let previous = b"#!/bin/sh\necho the previous kubelet\n";
    std::fs::write(disk.path().join("kubelet"), previous).unwrap();

    let mut file = std::fs::File::open(&packed).unwrap();
    let err = stage::stage(Some(&set), &mut file, &["kubelet"], disk.path(), None).unwrap_err();
    let text = format!("{err:#}");
    let path = disk.path().join("kubelet");
    assert!(text.contains(&format!("staging component kubelet at {}", path.display())), "{text}");
    assert!(text.contains("No space left on device"), "{text}");
    assert_eq!(std::fs::read(&path).unwrap(), previous, "the previous kubelet is whole");
    let left: Vec<_> =
        std::fs::read_dir(disk.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, ["kubelet"], "nothing half-written is left");
}

/// A test build carrying the previous Kubernetes release (what an upgrade scenario starts
/// from) lists that release's components, and staging them gives binaries that report it.
#[test]
fn a_build_carrying_the_previous_release_lists_and_stages_its_components() {
    use integration::components::{self, Set};
    use integration::control_plane::PREVIOUS;
    let bare = integration::k0s_binary().unwrap();
    let carrying = components::carrying_at(&bare, Set::All, PREVIOUS).unwrap();

    let output = integration::run_k0s_binary(
        &carrying,
        &["components", "-o", "json"],
        integration::k0s::RUN_K0S_TIMEOUT,
    )
    .unwrap();
    assert!(output.status.success(), "{output:?}");
    let doc: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let listed: std::collections::BTreeMap<String, String> = doc["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (c["name"].as_str().unwrap().to_owned(), c["version"].as_str().unwrap().to_owned())
        })
        .collect();
    for name in ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet"] {
        assert_eq!(listed.get(name).map(String::as_str), Some(PREVIOUS.kubernetes), "{listed:?}");
    }
    let containerd = integration::node_binaries::CONTAINERD_VERSION;
    assert_eq!(listed.get("containerd").map(String::as_str), Some(containerd), "{listed:?}");

    let work = tempfile::tempdir().unwrap();
    let mut file = std::fs::File::open(&carrying).unwrap();
    let set = carried::read(&mut file).unwrap().expect("a carried set");
    let bin = work.path().join("bin");
    stage::stage(Some(&set), &mut file, &["kubelet", "kube-apiserver"], &bin, None).unwrap();
    for name in ["kubelet", "kube-apiserver"] {
        let version = integration::control_plane::version_of(&bin.join(name)).unwrap();
        assert!(version.ends_with(PREVIOUS.kubernetes), "{name} reports {version:?}");
    }
}

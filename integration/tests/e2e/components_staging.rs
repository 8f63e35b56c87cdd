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

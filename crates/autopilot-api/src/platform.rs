//! Platform names as Kubernetes and k0s spell them (Go's `GOOS`/`GOARCH`).
//!
//! Plans key their download URLs by `<os>-<arch>` (`linux-amd64`), matched against the
//! `kubernetes.io/os` and `kubernetes.io/arch` labels, so Rust's own names (`x86_64`,
//! `aarch64`, `macos`) must be translated before they are published or compared.

/// The Kubernetes (Go) name of the operating system this binary was built for.
pub fn os() -> &'static str {
    os_from_rust(std::env::consts::OS)
}

/// The Kubernetes (Go) name of the CPU architecture this binary was built for.
pub fn arch() -> &'static str {
    arch_from_rust(std::env::consts::ARCH, cfg!(target_endian = "little"))
}

/// The platform key of a Plan's `platforms` map: `<os>-<arch>`, e.g. `linux-amd64`.
pub fn platform_id(os: &str, arch: &str) -> String {
    format!("{os}-{arch}")
}

/// The platform key of this binary's own platform, e.g. `linux-amd64`.
pub fn current() -> String {
    platform_id(os(), arch())
}

/// Translate a Rust `target_os` name to its Go name; unknown names pass through.
fn os_from_rust(os: &'static str) -> &'static str {
    match os {
        "macos" => "darwin",
        other => other,
    }
}

/// Translate a Rust `target_arch` name to its Go name; unknown names pass through.
fn arch_from_rust(arch: &'static str, little_endian: bool) -> &'static str {
    match (arch, little_endian) {
        ("x86_64", _) => "amd64",
        ("x86", _) => "386",
        ("aarch64", _) => "arm64",
        ("powerpc64", true) => "ppc64le",
        ("powerpc64", false) => "ppc64",
        ("loongarch64", _) => "loong64",
        ("mips64", true) => "mips64le",
        ("mips", true) => "mipsle",
        (other, _) => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_architectures_map_to_go_names() {
        assert_eq!(arch_from_rust("x86_64", true), "amd64");
        assert_eq!(arch_from_rust("aarch64", true), "arm64");
        assert_eq!(arch_from_rust("arm", true), "arm");
        assert_eq!(arch_from_rust("x86", true), "386");
        assert_eq!(arch_from_rust("powerpc64", true), "ppc64le");
        assert_eq!(arch_from_rust("powerpc64", false), "ppc64");
        assert_eq!(arch_from_rust("s390x", false), "s390x");
        assert_eq!(arch_from_rust("riscv64", true), "riscv64");
        assert_eq!(arch_from_rust("loongarch64", true), "loong64");
    }

    #[test]
    fn rust_operating_systems_map_to_go_names() {
        assert_eq!(os_from_rust("linux"), "linux");
        assert_eq!(os_from_rust("windows"), "windows");
        assert_eq!(os_from_rust("macos"), "darwin");
        assert_eq!(os_from_rust("freebsd"), "freebsd");
    }

    #[test]
    fn platform_id_joins_os_and_arch_with_a_dash() {
        assert_eq!(platform_id("linux", "amd64"), "linux-amd64");
        assert_eq!(current(), format!("{}-{}", os(), arch()));
    }

    #[test]
    fn this_build_has_a_go_style_platform() {
        assert!(!os().is_empty());
        assert_ne!(arch(), "x86_64");
        assert_ne!(arch(), "aarch64");
    }
}

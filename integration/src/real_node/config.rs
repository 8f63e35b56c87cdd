//! The configuration files of one real node (pure: paths and addresses in, text out).

use std::{net::Ipv4Addr, path::Path};

/// Where one node keeps what its containerd and kubelet write, all under its directory.
#[derive(Debug, Clone)]
pub(crate) struct NodeLayout {
    /// The node's directory.
    pub(crate) dir: std::path::PathBuf,
}

impl NodeLayout {
    pub(crate) fn containerd_dir(&self) -> std::path::PathBuf {
        self.dir.join("containerd")
    }
    /// The layout `k0s` gives a data directory, for the node's directory: where containerd's
    /// configuration, state and socket are.
    pub(crate) fn components(&self) -> k0s_components::worker::Layout {
        k0s_components::worker::Layout { data_dir: self.dir.clone() }
    }
    pub(crate) fn containerd_config(&self) -> std::path::PathBuf {
        self.components().containerd_config()
    }
    pub(crate) fn containerd_socket(&self) -> std::path::PathBuf {
        self.components().containerd_socket()
    }
    pub(crate) fn cni_conf_dir(&self) -> std::path::PathBuf {
        self.containerd_dir().join("net.d")
    }
    pub(crate) fn kubelet_dir(&self) -> std::path::PathBuf {
        self.dir.join("kubelet")
    }
    pub(crate) fn kubelet_config(&self) -> std::path::PathBuf {
        self.dir.join("kubelet.yaml")
    }
}

/// Everything that differs between the nodes of one set of real nodes.
#[derive(Debug, Clone)]
pub(crate) struct NodeParams<'a> {
    /// The node's own directory.
    pub(crate) layout: &'a NodeLayout,
    /// The node's address, on the loopback interface of the set's network namespace.
    pub(crate) ip: Ipv4Addr,
    /// The node's index in its set (its bridge and Pod subnet).
    pub(crate) index: u8,
    /// The cgroup (in every v1 hierarchy) the kubelet puts its Pods under, e.g. `/k0s-it-…`.
    pub(crate) cgroup_root: &'a str,
    /// The image the sandboxes run.
    pub(crate) pause_image: &'a str,
    /// The cluster CA (the kubelet trusts client certificates it signed).
    pub(crate) ca_cert: &'a Path,
    /// `runc`.
    pub(crate) runc: &'a Path,
    /// Where the CNI plugins are.
    pub(crate) cni_bin_dir: &'a Path,
}

/// The node's bridge (inside the namespace; one per node).
pub(crate) fn bridge_name(index: u8) -> String {
    format!("k0sit{index}")
}

/// The node's Pod subnet, `10.244.<index>.0/24` (inside the namespace only).
pub(crate) fn pod_subnet(index: u8) -> String {
    format!("10.244.{index}.0/24")
}

/// containerd's configuration: the one `k0s worker --run-components` writes
/// ([`k0s_components::worker::containerd_toml`]), for the node's directory as the data
/// directory, its CNI networks, runc and sandbox image.
pub(crate) fn containerd_toml(p: &NodeParams<'_>) -> String {
    let args = k0s_components::worker::WorkerComponentArgs {
        node_ip: Some(p.ip.into()),
        cni_conf_dir: p.layout.cni_conf_dir(),
        cni_bin_dir: p.cni_bin_dir.to_path_buf(),
        runc: p.runc.to_path_buf(),
        pause_image: p.pause_image.to_owned(),
        ..Default::default()
    };
    k0s_components::worker::containerd_toml(&p.layout.components(), &args)
}

/// The node's CNI network: one bridge with host-local addresses from its own subnet.
pub(crate) fn cni_conflist(p: &NodeParams<'_>) -> String {
    let ipam_dir = p.layout.containerd_dir().join("ipam");
    serde_json::json!({
        "cniVersion": "1.0.0",
        "name": format!("k0s-it-{}", p.index),
        "plugins": [{
            "type": "bridge",
            "bridge": bridge_name(p.index),
            "isGateway": true,
            "ipMasq": false,
            "hairpinMode": true,
            "ipam": {
                "type": "host-local",
                "dataDir": ipam_dir,
                "ranges": [[{ "subnet": pod_subnet(p.index) }]],
            },
        }],
    })
    .to_string()
}

/// The kubelet's configuration: cgroupfs under its own root, served on its node address
/// only (several kubelets share the namespace), webhook authorization off (the API server
/// reaches no kubelet; nothing else can reach the namespace), image garbage collection and
/// node-pressure eviction effectively off (the images are imported, the disk and memory are
/// the machine's and shared with the rest of the tests), cgroup v1 accepted.
pub(crate) fn kubelet_yaml(p: &NodeParams<'_>) -> String {
    let socket = p.layout.containerd_socket();
    serde_json::json!({
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": p.ip.to_string(),
        "port": 10250,
        "healthzBindAddress": p.ip.to_string(),
        "healthzPort": 10248,
        "readOnlyPort": 0,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": p.cgroup_root,
        "failCgroupV1": false,
        "failSwapOn": false,
        "resolvConf": "",
        "containerRuntimeEndpoint": format!("unix://{}", socket.display()),
        "imageServiceEndpoint": format!("unix://{}", socket.display()),
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1Mi",
            "nodefs.inodesFree": "1",
            "imagefs.available": "1Mi",
        },
        "authentication": {
            "anonymous": { "enabled": false },
            "webhook": { "enabled": false },
            "x509": { "clientCAFile": p.ca_cert },
        },
        "authorization": { "mode": "AlwaysAllow" },
        "serializeImagePulls": false,
        "nodeStatusUpdateFrequency": "2s",
        "nodeStatusReportFrequency": "10s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
        "shutdownGracePeriod": "0s",
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(layout: &NodeLayout) -> NodeParams<'_> {
        NodeParams {
            layout,
            ip: Ipv4Addr::new(10, 213, 0, 11),
            index: 1,
            cgroup_root: "/k0s-it-1-worker-0",
            pause_image: "localhost/k0s-it/pause:1",
            ca_cert: Path::new("/tmp/c/pki/ca.crt"),
            runc: Path::new("/usr/sbin/runc"),
            cni_bin_dir: Path::new("/usr/lib/cni"),
        }
    }

    #[test]
    fn every_path_containerd_writes_is_under_the_node_directory() {
        let layout = NodeLayout { dir: "/tmp/c/real/worker-0".into() };
        let toml = containerd_toml(&params(&layout));
        for key in ["root", "state", "address", "path", "Root", "conf_dir"] {
            let line = toml
                .lines()
                .find(|l| l.trim_start().starts_with(&format!("{key} =")))
                .unwrap_or_else(|| panic!("no {key} in\n{toml}"));
            assert!(line.contains("\"/tmp/c/real/worker-0/"), "{line}");
        }
        assert!(toml.contains(r#"conf_dir = "/tmp/c/real/worker-0/containerd/net.d""#), "{toml}");
        assert!(toml.contains("restrict_oom_score_adj = true"));
        assert!(toml.contains(r#"sandbox = "localhost/k0s-it/pause:1""#));
        assert!(toml.contains("io.containerd.nri.v1.nri"));
    }

    #[test]
    fn the_kubelet_serves_on_its_node_address_under_its_own_cgroup_root() {
        let layout = NodeLayout { dir: "/tmp/c/real/worker-0".into() };
        let config: serde_json::Value =
            serde_json::from_str(&kubelet_yaml(&params(&layout))).unwrap();
        assert_eq!(config["address"], "10.213.0.11");
        assert_eq!(config["healthzBindAddress"], "10.213.0.11");
        assert_eq!(config["cgroupRoot"], "/k0s-it-1-worker-0");
        assert_eq!(
            config["containerRuntimeEndpoint"],
            "unix:///tmp/c/real/worker-0/run/containerd.sock"
        );
    }

    #[test]
    fn each_node_has_its_own_bridge_and_subnet() {
        let layout = NodeLayout { dir: "/tmp/c/real/worker-0".into() };
        let list: serde_json::Value =
            serde_json::from_str(&cni_conflist(&params(&layout))).unwrap();
        assert_eq!(list["plugins"][0]["bridge"], "k0sit1");
        assert_eq!(list["plugins"][0]["ipam"]["ranges"][0][0]["subnet"], "10.244.1.0/24");
    }
}

//! A preflight command's `data`, parsed and validated per command id.
//!
//! Shared by the controller, which refuses a plan whose data no node could use before
//! anything runs, and the node agent, which parses again (its Plan may be newer or older
//! than the controller's) and reports status code 22 for data it cannot use.

use std::net::IpAddr;

use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::v1beta2::{PreflightCommandId, SchedulerData};

/// What a check asks a node to do, with its data validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// `scheduler`: run the referenced Pod.
    Scheduler(SchedulerData),
    /// `diskSpaceAvailable`: free bytes of the filesystem holding `path`.
    DiskSpaceAvailable(DiskSpace),
    /// `tcpDial`: open a TCP connection to `host:port`.
    TcpDial(TcpDial),
    /// `portAvailable`: bind `address:port`.
    PortAvailable(PortAvailable),
    /// `httpGet`: GET `url`.
    HttpGet(HttpGet),
    /// `fileExists`: whether `path` exists.
    FileExists(FileExists),
    /// `k0sVersion`: the version the node runs.
    K0sVersion,
    /// `exec`: run the allow-listed executable `name`.
    Exec(Exec),
}

/// `diskSpaceAvailable` data: `{path, minBytes}`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DiskSpace {
    /// An absolute path on the filesystem to measure (for example `/var/lib/k0s`).
    pub path: String,
    /// When set, fewer free bytes than this makes the probe return status code 1.
    #[serde(default)]
    pub min_bytes: Option<u64>,
}

/// `tcpDial` data: `{host, port}`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TcpDial {
    /// Host name or IP address to dial.
    pub host: String,
    /// TCP port, 1 to 65535.
    pub port: u16,
}

/// `portAvailable` data: `{port, address}`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PortAvailable {
    /// TCP port that must be free, 1 to 65535.
    pub port: u16,
    /// Local address to bind; default `0.0.0.0` (every IPv4 address).
    #[serde(default = "unspecified_v4")]
    pub address: IpAddr,
}

fn unspecified_v4() -> IpAddr {
    IpAddr::from([0, 0, 0, 0])
}

/// `httpGet` data: `{url}`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpGet {
    /// `http://` or `https://` URL with a host.
    pub url: String,
}

/// `fileExists` data: `{path}`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileExists {
    /// An absolute path.
    pub path: String,
}

/// `exec` data: `{name}`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Exec {
    /// The entry of the node's allow-list to run; never a command line.
    pub name: String,
}

impl Request {
    /// Parse and validate `data` for the command `id`. The error says what is wrong, in
    /// lowercase, naming the field.
    pub fn parse(id: PreflightCommandId, data: Option<&serde_json::Value>) -> Result<Self, String> {
        match id {
            PreflightCommandId::Scheduler => {
                let data: SchedulerData = required(id, data)?;
                if data.kubernetes.pod_name.trim().is_empty() {
                    return Err("kubernetes.podName is empty".to_owned());
                }
                if data.kubernetes.global && !data.kubernetes.node_selector.is_empty() {
                    return Err("kubernetes.global and kubernetes.nodeSelector are both set; \
                                choose one"
                        .to_owned());
                }
                Ok(Self::Scheduler(data))
            }
            PreflightCommandId::DiskSpaceAvailable => {
                let data: DiskSpace = required(id, data)?;
                absolute("path", &data.path)?;
                Ok(Self::DiskSpaceAvailable(data))
            }
            PreflightCommandId::TcpDial => {
                let data: TcpDial = required(id, data)?;
                if data.host.trim().is_empty() || data.host.chars().any(char::is_whitespace) {
                    return Err(format!("host {:?} is not a host name or address", data.host));
                }
                nonzero_port(data.port)?;
                Ok(Self::TcpDial(data))
            }
            PreflightCommandId::PortAvailable => {
                let data: PortAvailable = required(id, data)?;
                nonzero_port(data.port)?;
                Ok(Self::PortAvailable(data))
            }
            PreflightCommandId::HttpGet => {
                let data: HttpGet = required(id, data)?;
                if let Some(problem) = crate::payload::url_problem(&data.url) {
                    return Err(format!("url {problem}"));
                }
                Ok(Self::HttpGet(data))
            }
            PreflightCommandId::FileExists => {
                let data: FileExists = required(id, data)?;
                absolute("path", &data.path)?;
                Ok(Self::FileExists(data))
            }
            PreflightCommandId::K0sVersion => match data {
                None => Ok(Self::K0sVersion),
                Some(serde_json::Value::Object(map)) if map.is_empty() => Ok(Self::K0sVersion),
                Some(_) => Err("k0sVersion takes no data".to_owned()),
            },
            PreflightCommandId::Exec => {
                let data: Exec = required(id, data)?;
                if data.name.trim().is_empty() {
                    return Err("name is empty".to_owned());
                }
                Ok(Self::Exec(data))
            }
        }
    }
}

fn required<T: DeserializeOwned>(
    id: PreflightCommandId,
    data: Option<&serde_json::Value>,
) -> Result<T, String> {
    let data = data.ok_or_else(|| format!("{id} needs data"))?;
    T::deserialize(data).map_err(|error| format!("{id} data: {error}"))
}

fn absolute(field: &str, path: &str) -> Result<(), String> {
    if path.starts_with('/') {
        Ok(())
    } else {
        Err(format!("{field} {path:?} is not an absolute path"))
    }
}

fn nonzero_port(port: u16) -> Result<(), String> {
    if port == 0 { Err("port 0 is not a port; use 1 to 65535".to_owned()) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(id: PreflightCommandId, data: serde_json::Value) -> Result<Request, String> {
        Request::parse(id, Some(&data))
    }

    #[test]
    fn each_built_in_probe_reads_its_data() {
        use PreflightCommandId as C;
        assert_eq!(
            parse(C::DiskSpaceAvailable, json!({"path": "/var", "minBytes": 10})),
            Ok(Request::DiskSpaceAvailable(DiskSpace { path: "/var".into(), min_bytes: Some(10) }))
        );
        assert_eq!(
            parse(C::TcpDial, json!({"host": "127.0.0.1", "port": 6443})),
            Ok(Request::TcpDial(TcpDial { host: "127.0.0.1".into(), port: 6443 }))
        );
        assert_eq!(
            parse(C::PortAvailable, json!({"port": 10250})),
            Ok(Request::PortAvailable(PortAvailable {
                port: 10250,
                address: IpAddr::from([0, 0, 0, 0])
            }))
        );
        assert_eq!(
            parse(C::HttpGet, json!({"url": "https://example.com/healthz"})),
            Ok(Request::HttpGet(HttpGet { url: "https://example.com/healthz".into() }))
        );
        assert_eq!(
            parse(C::FileExists, json!({"path": "/etc/k0s/k0s.yaml"})),
            Ok(Request::FileExists(FileExists { path: "/etc/k0s/k0s.yaml".into() }))
        );
        assert_eq!(Request::parse(C::K0sVersion, None), Ok(Request::K0sVersion));
        assert_eq!(parse(C::K0sVersion, json!({})), Ok(Request::K0sVersion));
        assert_eq!(
            parse(C::Exec, json!({"name": "etcd-health"})),
            Ok(Request::Exec(Exec { name: "etcd-health".into() }))
        );
    }

    #[test]
    fn invalid_data_says_what_is_wrong() {
        use PreflightCommandId as C;
        let cases = [
            (C::TcpDial, json!({"host": "a"}), "missing field `port`"),
            (C::TcpDial, json!({"host": "a", "port": 70000}), "tcpDial data:"),
            (C::TcpDial, json!({"host": "a b", "port": 1}), "is not a host name"),
            (C::PortAvailable, json!({"port": 0}), "port 0 is not a port"),
            (C::PortAvailable, json!({"port": 1, "address": "nowhere"}), "tcpDial"),
            (C::DiskSpaceAvailable, json!({"path": "var"}), "not an absolute path"),
            (C::FileExists, json!({"path": "/x", "mode": 1}), "unknown field `mode`"),
            (C::HttpGet, json!({"url": "ftp://x"}), "not an http:// or https:// URL with a host"),
            (C::K0sVersion, json!({"x": 1}), "takes no data"),
            (C::Exec, json!({"name": " "}), "name is empty"),
            (C::Scheduler, json!({"kubernetes": {"podName": ""}}), "podName is empty"),
        ];
        for (id, data, expected) in cases {
            let expected = if expected == "tcpDial" { "portAvailable data:" } else { expected };
            let error = parse(id, data.clone()).expect_err(&format!("{id} {data}"));
            assert!(error.contains(expected), "{id} {data}: {error}");
        }
        assert_eq!(
            Request::parse(C::TcpDial, None),
            Err("tcpDial needs data".to_owned()),
            "data is required"
        );
    }

    #[test]
    fn scheduler_data_reads_camel_case_and_refuses_seed_spellings_naming_them() {
        let request = parse(
            PreflightCommandId::Scheduler,
            json!({"kubernetes": {"podName": "license-checker", "global": true}}),
        )
        .expect("seed 004's example, in camelCase");
        let Request::Scheduler(data) = request else { panic!("a scheduler request") };
        assert_eq!(data.kubernetes.pod_name, "license-checker");
        assert!(data.kubernetes.global);

        // The API server keeps `data` as written, so these reach the controller: refused,
        // never dropped (a dropped nodeSelector would run the check on every target).
        for (id, data, named) in [
            (
                PreflightCommandId::Scheduler,
                json!({"kubernetes": {"pod_name": "license-checker"}}),
                "pod_name",
            ),
            (
                PreflightCommandId::Scheduler,
                json!({"kubernetes": {"podName": "p", "node_selector": {"role": "edge"}}}),
                "node_selector",
            ),
            (PreflightCommandId::Scheduler, json!({"kubernetes": {"podName": "p"}, "x": 1}), "x"),
            (
                PreflightCommandId::DiskSpaceAvailable,
                json!({"path": "/var", "min_bytes": 10}),
                "min_bytes",
            ),
        ] {
            let error = parse(id, data.clone()).expect_err(&data.to_string());
            assert!(error.contains(&format!("unknown field `{named}`")), "{data}: {error}");
        }
    }
}

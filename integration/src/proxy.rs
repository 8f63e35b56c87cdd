//! A real forward proxy for the proxy scenarios: `tinyproxy` (installed by `.ci/run` from
//! the distribution's packages) with the test's own configuration — its own port on
//! 127.0.0.1, its own log, `CONNECT` allowed to the test servers' ports only (the packaged
//! configuration allows 443 and 563), optionally Basic credentials — stopped when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, bail};

/// How long tinyproxy may take to listen.
const STARTUP: Duration = Duration::from_secs(10);

/// A running tinyproxy.
#[derive(Debug)]
pub struct Tinyproxy {
    child: Child,
    port: u16,
    log: PathBuf,
    credentials: Option<(String, String)>,
}

impl Tinyproxy {
    /// Whether `tinyproxy` can be run here.
    pub fn is_installed() -> bool {
        Command::new("tinyproxy")
            .arg("-v")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Starts tinyproxy in `dir` (its configuration and log go there), allowing `CONNECT`
    /// to `connect_ports`, requiring `credentials` (user, password) if given; returns once
    /// it accepts connections.
    pub async fn start(
        dir: &Path,
        connect_ports: &[u16],
        credentials: Option<(&str, &str)>,
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let credentials = credentials.map(|(u, p)| (u.to_owned(), p.to_owned()));
        // Another process may take the free port before tinyproxy binds it: try again.
        for _ in 0..5 {
            let port = crate::net::free_port(std::net::Ipv4Addr::LOCALHOST)?;
            let log = dir.join("tinyproxy.log");
            let config = dir.join("tinyproxy.conf");
            let mut text = format!(
                "Port {port}\nListen 127.0.0.1\nTimeout 60\nLogFile \"{}\"\nLogLevel Connect\n\
                 MaxClients 50\nAllow 127.0.0.1\nDisableViaHeader Yes\n",
                log.display()
            );
            for p in connect_ports {
                text.push_str(&format!("ConnectPort {p}\n"));
            }
            if let Some((user, password)) = &credentials {
                text.push_str(&format!("BasicAuth {user} {password}\n"));
            }
            std::fs::write(&config, text).context("writing the tinyproxy configuration")?;
            let _ = std::fs::remove_file(&log);
            let stderr = std::fs::File::create(dir.join("tinyproxy.stderr"))?;
            let child = Command::new("tinyproxy")
                .arg("-d")
                .arg("-c")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(stderr)
                .spawn()
                .context("starting tinyproxy (is it installed? .ci/run installs it)")?;
            let mut proxy = Self { child, port, log, credentials: credentials.clone() };
            let listening = crate::wait_for(STARTUP, "tinyproxy to listen", || {
                let exited = proxy.child.try_wait().ok().flatten();
                async move {
                    if let Some(status) = exited {
                        return Ok(Some(Err(status)));
                    }
                    let connected =
                        tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok();
                    Ok(connected.then_some(Ok(())))
                }
            })
            .await?;
            match listening {
                Ok(()) => return Ok(proxy),
                Err(status) => {
                    let log =
                        std::fs::read_to_string(dir.join("tinyproxy.stderr")).unwrap_or_default();
                    if !log.contains("in use") && !log.contains("listening sockets") {
                        bail!("tinyproxy exited with {status}: {log}");
                    }
                }
            }
        }
        bail!("tinyproxy found no free port")
    }

    /// `http://127.0.0.1:<port>`, with `user:password@` if it requires credentials.
    pub fn url(&self) -> String {
        match &self.credentials {
            Some((user, password)) => format!("http://{user}:{password}@127.0.0.1:{}", self.port),
            None => format!("http://127.0.0.1:{}", self.port),
        }
    }

    /// The request lines tinyproxy logged (`CONNECT 127.0.0.1:1234 HTTP/1.1`,
    /// `GET http://… HTTP/1.1`), in order.
    pub fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.split_once("Request (file descriptor"))
            .filter_map(|(_, rest)| rest.split_once("): "))
            .map(|(_, request)| request.trim().to_owned())
            .collect()
    }

    /// The whole log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Tinyproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

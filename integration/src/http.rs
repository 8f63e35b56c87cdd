//! A tiny loopback HTTP server for update payloads (a v2 k0s binary, a bundle), as the
//! update server of a real installation would serve them.

use std::sync::Arc;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::task::JoinHandle;

/// Serves one body at every path over plain HTTP/1.1 on 127.0.0.1; stops when dropped.
#[derive(Debug)]
pub struct FileServer {
    base: String,
    task: JoinHandle<()>,
}

impl FileServer {
    /// Start serving `body`.
    pub async fn start(body: Vec<u8>) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let body = Arc::new(body);
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else { return };
                let body = body.clone();
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = socket.write_all(head.as_bytes()).await;
                    let _ = socket.write_all(&body).await;
                    let _ = socket.shutdown().await;
                });
            }
        });
        Ok(Self { base, task })
    }

    /// `http://127.0.0.1:<port>` (any path serves the body).
    pub fn base_url(&self) -> &str {
        &self.base
    }
}

impl Drop for FileServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

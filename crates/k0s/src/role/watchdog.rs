//! The supervisor's watchdog (systemd `WatchdogSec=`, `sd_notify(3)`): while the units give
//! one (`WATCHDOG_USEC`, `NOTIFY_SOCKET`, and `WATCHDOG_PID` naming this process), a node
//! process sends `WATCHDOG=1` at half the interval from a task on its runtime. A process that
//! hangs (its runtime blocked, or a binary that never runs this code) sends nothing, and the
//! supervisor kills it (SIGABRT) at the end of the interval and starts it again. For the
//! post-update watch that is an abnormal exit like a crash: the guard before the next start
//! counts it, and the third rolls the new binary back (docs/updating-a-cluster.md).

use std::time::Duration;

/// Where and how often to notify: the socket (`@name` for an abstract one) and the period.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Watchdog {
    socket: String,
    every: Duration,
}

/// The watchdog the supervisor asks for, from its environment (`WATCHDOG_USEC`,
/// `WATCHDOG_PID`, `NOTIFY_SOCKET`) and this process's id: none without an interval or a
/// socket, or when `WATCHDOG_PID` names another process (a child inheriting the variables).
pub(crate) fn configured(
    usec: Option<&str>,
    pid: Option<&str>,
    socket: Option<&str>,
    own_pid: u32,
) -> Option<Watchdog> {
    let usec: u64 = usec?.trim().parse().ok().filter(|u| *u > 0)?;
    if let Some(pid) = pid
        && pid.trim().parse::<u32>().ok() != Some(own_pid)
    {
        return None;
    }
    let socket = socket.filter(|s| !s.is_empty())?.to_string();
    Some(Watchdog { socket, every: Duration::from_micros(usec) / 2 })
}

/// Starts notifying the supervisor's watchdog, if it asks for one. Must be called inside
/// the runtime.
pub(crate) fn spawn() {
    let var = |name| std::env::var(name).ok();
    let found = configured(
        var("WATCHDOG_USEC").as_deref(),
        var("WATCHDOG_PID").as_deref(),
        var("NOTIFY_SOCKET").as_deref(),
        std::process::id(),
    );
    let Some(watchdog) = found else { return };
    tracing::info!(every = ?watchdog.every, socket = %watchdog.socket, "notifying the supervisor's watchdog");
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(watchdog.every);
        let mut warned = false;
        loop {
            ticker.tick().await;
            match notify(&watchdog.socket, "WATCHDOG=1") {
                Ok(()) => warned = false,
                Err(err) if !warned => {
                    warned = true;
                    tracing::warn!(error = %err, socket = %watchdog.socket, "cannot notify the supervisor's watchdog");
                }
                Err(_) => {}
            }
        }
    });
}

/// Sends `message` to the notify socket `socket` (a path, or `@name`: abstract).
fn notify(socket: &str, message: &str) -> std::io::Result<()> {
    use std::os::linux::net::SocketAddrExt as _;
    let datagram = std::os::unix::net::UnixDatagram::unbound()?;
    match socket.strip_prefix('@') {
        Some(name) => {
            let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
            datagram.send_to_addr(message.as_bytes(), &address)
        }
        None => datagram.send_to(message.as_bytes(), socket),
    }
    .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_is_notified_at_half_its_interval_only_by_the_process_it_names() {
        let asked = configured(Some("30000000"), Some("42"), Some("/run/notify"), 42);
        assert_eq!(
            asked,
            Some(Watchdog { socket: "/run/notify".into(), every: Duration::from_secs(15) })
        );
        // Without WATCHDOG_PID the variables are this process's.
        assert!(configured(Some("30000000"), None, Some("@notify"), 42).is_some());
        // A child that inherited them (a trial boot, a component) stays silent.
        assert_eq!(configured(Some("30000000"), Some("41"), Some("/run/notify"), 42), None);
        // No interval, a zero or garbled one, or no socket: no watchdog.
        for (usec, socket) in [(None, Some("/s")), (Some("0"), Some("/s")), (Some("x"), Some("/s"))]
        {
            assert_eq!(configured(usec, None, socket, 42), None, "{usec:?}");
        }
        assert_eq!(configured(Some("30000000"), None, None, 42), None);
        assert_eq!(configured(Some("30000000"), None, Some(""), 42), None);
    }

    #[test]
    fn a_notification_reaches_a_socket_at_a_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("notify");
        let listener = std::os::unix::net::UnixDatagram::bind(&path).expect("bind");
        notify(&path.to_string_lossy(), "WATCHDOG=1").expect("sent");
        let mut buffer = [0u8; 64];
        let n = listener.recv(&mut buffer).expect("received");
        assert_eq!(&buffer[..n], b"WATCHDOG=1");
    }
}

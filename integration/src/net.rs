//! Loopback addresses and free ports for the processes of a test cluster.

use std::{
    collections::BTreeSet,
    net::{Ipv4Addr, TcpListener},
    sync::Mutex,
};

use anyhow::{Context as _, bail};

/// Ports this test process has handed out already, so two clusters in one process never get
/// the same one. Other processes can still race us between probing and binding; callers
/// retry when a server fails with "address already in use".
static HANDED_OUT: Mutex<BTreeSet<(Ipv4Addr, u16)>> = Mutex::new(BTreeSet::new());

/// The loopback address of controller `index`'s apiserver: 127.0.0.(2 + index).
pub(crate) fn controller_ip(index: usize) -> anyhow::Result<Ipv4Addr> {
    match u8::try_from(index + 2) {
        Ok(last) if last < 255 => Ok(Ipv4Addr::new(127, 0, 0, last)),
        _ => bail!("controller index {index} does not fit into 127.0.0.0/24"),
    }
}

/// A port that is free on `ip` right now: binds `ip:0`, notes the port and releases it.
pub(crate) fn free_port(ip: Ipv4Addr) -> anyhow::Result<u16> {
    for _ in 0..64 {
        let listener =
            TcpListener::bind((ip, 0)).with_context(|| format!("binding {ip}:0 to find a port"))?;
        let port = listener.local_addr()?.port();
        drop(listener);
        let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if handed_out.insert((ip, port)) {
            return Ok(port);
        }
    }
    bail!("found no free port on {ip}")
}

/// Whether a server log says it lost a race for its port.
pub(crate) fn lost_port_race(log_tail: &str) -> bool {
    log_tail.contains("address already in use")
}

/// What is done with each service announced on the machine's loopback: one hook per set of
/// real nodes whose namespace must reach it ([`on_loopback_services`]).
type Hook = std::sync::Arc<dyn Fn(std::net::SocketAddr) + Send + Sync>;

/// The services on the machine's loopback that nodes living in a network namespace reach
/// (every [`crate::http::FileServer`], the tests' download servers), and the hooks that make
/// them reachable there.
static LOOPBACK: Mutex<Loopback> = Mutex::new((Vec::new(), Vec::new(), 0));

/// The services announced so far, the hooks by id, and the last id given out.
type Loopback = (Vec<std::net::SocketAddr>, Vec<(u64, Hook)>, u64);

/// Announces a service on the machine's loopback: every hook sees it before this returns.
pub(crate) fn announce_loopback_service(address: std::net::SocketAddr) {
    let hooks: Vec<Hook> = {
        let mut loopback = LOOPBACK.lock().unwrap_or_else(|p| p.into_inner());
        loopback.0.push(address);
        loopback.1.iter().map(|(_, hook)| hook.clone()).collect()
    };
    for hook in hooks {
        hook(address);
    }
}

/// Calls `hook` for each service announced from now on, and now for each one announced
/// before that still accepts connections; returns the id [`stop_loopback_hook`] takes.
pub(crate) fn on_loopback_services(hook: Hook) -> u64 {
    let (earlier, id) = {
        let mut loopback = LOOPBACK.lock().unwrap_or_else(|p| p.into_inner());
        loopback.2 += 1;
        let id = loopback.2;
        loopback.1.push((id, hook.clone()));
        (loopback.0.clone(), id)
    };
    for address in earlier {
        if std::net::TcpStream::connect_timeout(&address, std::time::Duration::from_millis(200))
            .is_ok()
        {
            hook(address);
        }
    }
    id
}

/// Stops the hook `id` of [`on_loopback_services`].
pub(crate) fn stop_loopback_hook(id: u64) {
    let mut loopback = LOOPBACK.lock().unwrap_or_else(|p| p.into_inner());
    loopback.1.retain(|(hook, _)| *hook != id);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bind_failure_of_kube_apiserver_is_a_lost_port_race() {
        let log = r#"E1122 02:51:00.390406 run.go:72] "command failed" err="failed to create listener: failed to listen on 127.0.0.2:44201: listen tcp 127.0.0.2:44201: bind: address already in use""#;
        assert!(lost_port_race(log));
        assert!(!lost_port_race(r#"err="unknown flag: --bogus""#));
    }

    #[test]
    fn free_ports_are_never_handed_out_twice() {
        let ip = controller_ip(0).unwrap();
        let ports: BTreeSet<u16> = (0..20).map(|_| free_port(ip).unwrap()).collect();
        assert_eq!(ports.len(), 20);
    }

    #[test]
    fn controller_addresses_start_at_127_0_0_2() {
        assert_eq!(controller_ip(0).unwrap(), Ipv4Addr::new(127, 0, 0, 2));
        assert_eq!(controller_ip(2).unwrap(), Ipv4Addr::new(127, 0, 0, 4));
        assert!(controller_ip(253).is_err());
    }
}

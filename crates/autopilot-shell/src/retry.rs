//! Retrying against the API server through outages: which errors are worth retrying, and the
//! capped backoff of watches.

use autopilot_api::backoff::Capped;

/// Whether an API error means the server cannot answer now (connection failures, 5xx,
/// 429: worth retrying for as long as it takes), as opposed to a misconfiguration (TLS
/// trust, credentials) or an answer that will not change.
pub fn is_transient(err: &kube::Error) -> bool {
    match err {
        kube::Error::Api(status) => status.code >= 500 || status.code == 429,
        kube::Error::HyperError(_) | kube::Error::Service(_) => !is_tls_problem(err),
        _ => false,
    }
}

/// Whether a TLS error (an untrusted or mismatched certificate) is among the causes.
fn is_tls_problem(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(err);
    while let Some(e) = cause {
        if e.downcast_ref::<rustls::Error>().is_some() || e.to_string().contains("certificate") {
            return true;
        }
        cause = e.source();
    }
    false
}

/// [`Capped`] as a kube-runtime watch backoff: a watch broken by an API-server outage is
/// re-established within two seconds of the server answering again.
#[derive(Clone, Debug, Default)]
pub struct WatchBackoff(Capped);

impl Iterator for WatchBackoff {
    type Item = std::time::Duration;

    fn next(&mut self) -> Option<Self::Item> {
        Some(self.0.next_delay())
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.0.reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::utils::Backoff as _;

    fn status(code: u16) -> kube::Error {
        kube::Error::Api(kube::core::Status::failure("test", "Test").with_code(code).boxed())
    }

    #[test]
    fn server_errors_and_throttling_are_transient_refusals_are_not() {
        assert!(is_transient(&status(503)));
        assert!(is_transient(&status(429)));
        assert!(!is_transient(&status(403)));
        assert!(!is_transient(&status(404)));
    }

    #[test]
    fn watch_backoff_doubles_to_the_short_cap_and_resets() {
        let mut backoff = WatchBackoff::default();
        let delays: Vec<u128> = backoff.by_ref().take(5).map(|d| d.as_millis()).collect();
        assert_eq!(delays, vec![250, 500, 1000, 2000, 2000]);
        backoff.reset();
        assert_eq!(backoff.next(), Some(autopilot_api::backoff::FIRST));
    }
}

//! Retrying against the API server through outages: which errors are worth retrying, the one
//! retry-until-deadline loop ([`until`]), and the capped backoff of watches.

use std::future::Future;

use autopilot_api::backoff::Capped;
use tracing::warn;

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

/// An error [`until`] can judge: whether it means the API server cannot answer now.
pub trait Transient: std::fmt::Display {
    /// Whether retrying may mend it (see [`is_transient`]).
    fn is_transient(&self) -> bool;
}

impl Transient for kube::Error {
    fn is_transient(&self) -> bool {
        is_transient(self)
    }
}

impl Transient for anyhow::Error {
    /// Transient when any cause in its chain is a transient API error.
    fn is_transient(&self) -> bool {
        self.chain().any(|cause| cause.downcast_ref::<kube::Error>().is_some_and(is_transient))
    }
}

/// How [`until`] ended without a value.
#[derive(Debug)]
pub enum GaveUp<E> {
    /// The API server did not answer before the deadline: the last transient error.
    Unreachable(E),
    /// An error that retrying will not mend.
    Failed(E),
}

impl<E: std::error::Error + Send + Sync + 'static> GaveUp<E> {
    /// The error a start-up step reports when it gave up: an unreachable API server is named
    /// with how long it was tried (`startup_timeout`), anything else says what was being
    /// done (`what`).
    pub fn into_startup_error(
        self,
        server_url: &str,
        startup_timeout: std::time::Duration,
        what: &str,
    ) -> anyhow::Error {
        match self {
            Self::Unreachable(err) => anyhow::Error::new(err).context(format!(
                "cannot reach the API server at {server_url} within {}s",
                startup_timeout.as_secs()
            )),
            Self::Failed(err) => anyhow::Error::new(err).context(what.to_owned()),
        }
    }
}

/// Runs `op` until it succeeds. Transient failures ([`Transient`]) are logged and retried
/// after the next of `delays`, until `deadline` has passed (`None`: for ever, so an API
/// server outage never makes a node give up); any other failure ends it at once.
pub async fn until<T, E, F, Fut>(
    deadline: Option<tokio::time::Instant>,
    mut delays: Capped,
    what: &str,
    mut op: F,
) -> Result<T, GaveUp<E>>
where
    E: Transient,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    loop {
        match op().await {
            Ok(value) => return Ok(value),
            Err(err) if !err.is_transient() => return Err(GaveUp::Failed(err)),
            Err(err) if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) => {
                return Err(GaveUp::Unreachable(err));
            }
            Err(err) => {
                let delay = delays.next_delay();
                warn!(error = %format!("{err:#}"), retry_in = ?delay, "{what}: API server not answering, retrying");
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// Runs `op` until it succeeds or fails with something other than a transient API error;
/// transient failures are retried after [`startup_delays`] and logged, for ever: an API
/// server outage never makes a node give up.
pub async fn forever<T, F, Fut>(what: &str, op: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<T>>,
{
    until(None, startup_delays(), what, op)
        .await
        .map_err(|(GaveUp::Unreachable(err) | GaveUp::Failed(err))| err)
}

/// The delays between start-up attempts while the API server does not answer: from 200 ms,
/// doubling, up to 5 s.
pub fn startup_delays() -> Capped {
    Capped::new(std::time::Duration::from_millis(200), std::time::Duration::from_secs(5))
}

/// The deadline of a start-up that may take `timeout` from now (zero: no deadline).
pub fn deadline_after(timeout: std::time::Duration) -> Option<tokio::time::Instant> {
    (!timeout.is_zero()).then(|| tokio::time::Instant::now() + timeout)
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

/// A kube-runtime `Controller` trigger backoff that never waits, for a controller whose
/// watches each carry their own `WatchBackoff`: the controller's trigger backoff applies to
/// all its watches merged, so one watch's error would pause the others too.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoTriggerBackoff;

impl Iterator for NoTriggerBackoff {
    type Item = std::time::Duration;

    fn next(&mut self) -> Option<Self::Item> {
        Some(std::time::Duration::ZERO)
    }
}

impl kube::runtime::utils::Backoff for NoTriggerBackoff {
    fn reset(&mut self) {}
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

    #[tokio::test(start_paused = true)]
    async fn until_retries_outages_until_the_deadline_and_stops_at_a_refusal() {
        let delays = || {
            Capped::new(std::time::Duration::from_millis(200), std::time::Duration::from_secs(5))
        };
        // Two outages, then an answer.
        let mut calls = 0;
        let value = until(None, delays(), "test", || {
            calls += 1;
            let answer = if calls < 3 { Err(status(503)) } else { Ok(calls) };
            async move { answer }
        })
        .await;
        assert!(matches!(value, Ok(3)), "{value:?}");
        // A refusal is not retried.
        let mut calls = 0;
        let refused = until(None, delays(), "test", || {
            calls += 1;
            async { Err::<(), _>(status(403)) }
        })
        .await;
        assert!(matches!(refused, Err(GaveUp::Failed(_))), "{refused:?}");
        assert_eq!(calls, 1);
        // An outage longer than the deadline gives up, naming the last error.
        let start = tokio::time::Instant::now();
        let deadline = deadline_after(std::time::Duration::from_secs(10));
        let down = until(deadline, delays(), "test", || async { Err::<(), _>(status(503)) }).await;
        assert!(matches!(down, Err(GaveUp::Unreachable(_))), "{down:?}");
        assert!(start.elapsed() >= std::time::Duration::from_secs(10));
        assert!(start.elapsed() < std::time::Duration::from_secs(16));
        // An anyhow error is judged by its chain.
        let wrapped = anyhow::Error::from(status(503)).context("registering");
        assert!(Transient::is_transient(&wrapped));
        assert!(deadline_after(std::time::Duration::ZERO).is_none());
    }
}

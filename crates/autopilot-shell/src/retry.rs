//! Retrying against the API server through outages: which errors are worth retrying, the one
//! retry-until-deadline loop ([`until`]), the capped backoff of watches, and which answers to a
//! read are definitive ([`get_definitive`], [`plan_answer`]).

use std::future::Future;

use autopilot_api::backoff::Capped;
use autopilot_engine::authorize::read;
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

/// Whether `status` says the object `name` does not exist: a `404` whose details name it, as
/// the API server's resource handlers answer (`plans.autopilot.k0sproject.io "autopilot" not
/// found`). A `404` that names no object is not: a path the server does not serve (a CRD not
/// installed, or not synced yet by a server still starting) gets a plain-text `404 page not
/// found`, which kube turns into a `Status` without details (reason `Failed to parse error
/// data`); a proxy or an aggregated server may answer a `NotFound` that names nothing.
/// `Api::get_opt` goes by the reason alone, so the second could pass for a missing Plan.
pub fn is_object_not_found(status: &kube::core::Status, name: &str) -> bool {
    status.code == 404
        && status.reason == "NotFound"
        && status.details.as_ref().is_some_and(|details| details.name == name)
}

/// `Api::get_opt`, but `None` only on a definitive "no such object"
/// ([`is_object_not_found`]); a `404` of the resource type is returned as the error it is.
pub async fn get_definitive<K>(api: &kube::Api<K>, name: &str) -> Result<Option<K>, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.get(name).await {
        Ok(object) => Ok(Some(object)),
        Err(kube::Error::Api(status)) if is_object_not_found(&status, name) => Ok(None),
        Err(err) => Err(err),
    }
}

/// The answer to a read of the Plan ([`get_definitive`]), as
/// [`autopilot_engine::authorize::read::judge`] weighs it: `403` is forbidden, any other
/// `404` (not naming the Plan) an unserved resource type, every other error no answer.
pub fn plan_answer<K>(read: Result<Option<K>, kube::Error>) -> read::Answer<K> {
    match read {
        Ok(plan) => read::Answer::Read(plan),
        Err(kube::Error::Api(status)) if status.code == 403 => {
            read::Answer::Forbidden(status.message.clone())
        }
        Err(kube::Error::Api(status)) if status.code == 404 => {
            read::Answer::Unserved(status.message.clone())
        }
        Err(err) => read::Answer::Unanswered(err.to_string()),
    }
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

    /// The `Status` an API server's resource handler answers for a missing object `name`.
    fn object_not_found(name: &str) -> kube::core::Status {
        let details = kube::core::response::StatusDetails {
            name: name.to_owned(),
            group: "autopilot.k0sproject.io".to_owned(),
            kind: "plans".to_owned(),
            uid: String::new(),
            causes: Vec::new(),
            retry_after_seconds: 0,
        };
        kube::core::Status::failure(&format!("plans \"{name}\" not found"), "NotFound")
            .with_code(404)
            .with_details(details)
    }

    #[test]
    fn only_a_404_naming_the_object_says_it_does_not_exist() {
        assert!(is_object_not_found(&object_not_found("autopilot"), "autopilot"));
        assert!(!is_object_not_found(&object_not_found("other"), "autopilot"));
        // What kube makes of the plain-text 404 of a path not served (a CRD not synced yet).
        let unserved =
            kube::core::Status::failure("404 page not found", "Failed to parse error data")
                .with_code(404);
        assert!(!is_object_not_found(&unserved, "autopilot"));
        let bare = kube::core::Status::failure("not found", "NotFound").with_code(404);
        assert!(bare.is_not_found(), "what Api::get_opt takes for a missing object");
        assert!(!is_object_not_found(&bare, "autopilot"), "no details: no object named");
    }

    #[test]
    fn a_plan_read_is_forbidden_unserved_unanswered_or_definitive() {
        let api =
            |status: kube::core::Status| Err::<Option<()>, _>(kube::Error::Api(status.boxed()));
        assert_eq!(plan_answer(Ok(Some(()))), read::Answer::Read(Some(())));
        assert_eq!(plan_answer::<()>(Ok(None)), read::Answer::Read(None));
        let forbidden = kube::core::Status::failure("is forbidden", "Forbidden").with_code(403);
        assert_eq!(plan_answer(api(forbidden)), read::Answer::Forbidden("is forbidden".into()));
        let unserved =
            kube::core::Status::failure("404 page not found", "Failed to parse error data")
                .with_code(404);
        assert_eq!(plan_answer(api(unserved)), read::Answer::Unserved("404 page not found".into()));
        assert!(matches!(plan_answer(api(object_not_found("other"))), read::Answer::Unserved(_)));
        assert!(matches!(
            plan_answer(Err::<Option<()>, _>(status(503))),
            read::Answer::Unanswered(_)
        ));
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

//! Waiting on conditions with deadlines: a polling helper and a watch-based one.
//!
//! Tests never sleep for a fixed time to "let things settle"; they wait for the condition they
//! need and fail with a message naming it when the deadline passes.

use std::{fmt::Debug, future::Future, time::Duration};

use kube::{Api, Resource, runtime::wait::Condition};
use serde::de::DeserializeOwned;

pub use kube::runtime::wait::conditions;

/// First pause between two polls of [`wait_for`]; doubles up to [`MAX_POLL_INTERVAL`].
const MIN_POLL_INTERVAL: Duration = Duration::from_millis(25);

/// Longest pause between two polls of [`wait_for`]: short enough that tests do not waste
/// seconds, long enough not to hammer a 2-core machine.
const MAX_POLL_INTERVAL: Duration = Duration::from_millis(500);

/// Polls `check` until it returns `Ok(Some(value))`, and returns that value.
///
/// `Ok(None)` means "not yet". An `Err` also counts as "not yet" (the apiserver may be
/// restarting, say), but the last error is kept and reported if the deadline passes. The
/// timeout error names `what`, e.g. `wait_for(d, "plan p1 to complete", ..)`.
pub async fn wait_for<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut interval = MIN_POLL_INTERVAL;
    let mut last_error: Option<anyhow::Error> = None;
    loop {
        match check().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => {}
            Err(err) => last_error = Some(err),
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Err(match last_error {
                Some(err) => err.context(format!("timed out after {timeout:?} waiting for {what}")),
                None => anyhow::anyhow!("timed out after {timeout:?} waiting for {what}"),
            });
        }
        tokio::time::sleep(interval.min(deadline - now)).await;
        interval = (interval * 2).min(MAX_POLL_INTERVAL);
    }
}

/// Watches the object `name` until `condition` holds, and returns it (`None` if the condition
/// was met by the object not existing, as with [`conditions::is_deleted`]).
///
/// A thin deadline wrapper around [`kube::runtime::wait::await_condition`]; prefer it over
/// [`wait_for`] when the condition is about one object. The timeout error names `what`.
pub async fn wait_for_condition<K>(
    api: &Api<K>,
    name: &str,
    timeout: Duration,
    what: &str,
    condition: impl Condition<K>,
) -> anyhow::Result<Option<K>>
where
    K: Clone + Debug + Send + DeserializeOwned + Resource + 'static,
{
    let watch = kube::runtime::wait::await_condition(api.clone(), name, condition);
    match tokio::time::timeout(timeout, watch).await {
        Ok(result) => Ok(result.map_err(|err| {
            anyhow::Error::new(err).context(format!("watching {name} while waiting for {what}"))
        })?),
        Err(_) => anyhow::bail!("timed out after {timeout:?} waiting for {what} ({name})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn wait_for_returns_the_first_ready_value() {
        let mut calls = 0;
        let value = wait_for(Duration::from_secs(5), "the third call", || {
            calls += 1;
            let ready = calls >= 3;
            async move { Ok(ready.then_some(42)) }
        })
        .await
        .unwrap();
        assert_eq!((value, calls), (42, 3));
    }

    #[tokio::test]
    async fn wait_for_names_what_it_waited_for_and_the_last_error() {
        let err = wait_for(Duration::from_millis(100), "the moon", || async {
            Err::<Option<()>, _>(anyhow::anyhow!("still dark"))
        })
        .await
        .unwrap_err();
        let message = format!("{err:#}");
        assert!(message.contains("waiting for the moon"), "{message}");
        assert!(message.contains("still dark"), "{message}");
    }
}

//! The one watch-cache chain of the shells: a watch of one kind feeding a reflector cache,
//! slimmed before it is cached, with its own backoff, and no pause on an expired watch.

use futures::{Stream, StreamExt as _};
use kube::Resource;
use kube::api::Api;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher::{self, Event, watcher};
use serde::de::DeserializeOwned;

use crate::retry::WatchBackoff;

/// Watch `api` (narrowed by `config`) into the cache behind `writer`, passing each object
/// through `slim` before it is cached (drop what is never read). The stream must be polled
/// for the cache to fill; it yields the watch events (for triggers), with errors backed off
/// by a [`WatchBackoff`] of its own and `410 Gone` re-listed at once ([`relist_at_once`]).
pub fn cached<K>(
    writer: Writer<K>,
    api: Api<K>,
    config: watcher::Config,
    slim: impl FnMut(&mut K) + Send + 'static,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Clone + Default + Eq + std::hash::Hash + Send + Sync,
{
    relist_at_once(reflector::reflector(writer, watcher(api, config).modify(slim)))
        .backoff(WatchBackoff::default())
}

/// `events` without the `410 Gone` errors of an expired watch, to put before a backoff.
///
/// On `410 Gone` the watcher has already given up the old watch and re-lists on its next
/// poll; passed on, the error would make the backoff delay that re-list (by up to its cap,
/// right after an outage, when every watch of a restarted API server answers so) while the
/// engine's caches are stale and every write it attempts only loses a conflict.
pub fn relist_at_once<K>(
    events: impl Stream<Item = Result<Event<K>, watcher::Error>>,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> {
    events.filter(|event| {
        let expired = matches!(
            event,
            Err(watcher::Error::WatchError(status)) if status.code == 410
        );
        if expired {
            tracing::debug!("watch expired (410 Gone), re-listing at once");
        }
        std::future::ready(!expired)
    })
}

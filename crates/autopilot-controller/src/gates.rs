//! The leader's lookups for health gates (DESIGN §15): what a `kubernetes` gate lists and
//! what a `prometheus` gate queries, each bounded in time and size. A failed lookup is an
//! answer ([`GateAnswer::Unavailable`], the gate waits and fails at its timeout), never an
//! error of the pass.
//!
//! The controller lists only what gates name, with its own credentials: a kind its role
//! cannot list is answered with the API server's refusal, naming the kind, so the operator
//! sees what to grant (`docs/updating-a-cluster.md`, "Gates").

use std::time::Duration;

use autopilot_engine::plan::{GateAnswer, GateQuery};
use autopilot_engine::preflight::MAX_GATE_OBJECTS;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::GroupVersionKind;

/// How long one lookup may take.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

/// The most bytes of objects (as JSON, without `managedFields`) a `kubernetes` gate reads.
pub const MAX_LIST_BYTES: usize = 4 << 20;

/// Answer one gate lookup.
pub async fn answer(
    client: &kube::Client,
    http: &autopilot_shell::https::HttpsClient,
    query: &GateQuery,
) -> GateAnswer {
    let lookup = async {
        match query {
            GateQuery::List { api_version, kind, namespace, label_selector, field_selector } => {
                list(
                    client,
                    api_version,
                    kind,
                    namespace.as_deref(),
                    label_selector.as_deref(),
                    field_selector.as_deref(),
                )
                .await
            }
            GateQuery::Prometheus { url, query } => {
                match crate::prometheus::instant_query(http, url, query, LOOKUP_TIMEOUT).await {
                    Ok(vector) => match vector.to_cel_json() {
                        serde_json::Value::Array(samples) => Ok(samples),
                        other => Ok(vec![other]),
                    },
                    Err(err) => Err(error_chain(&err)),
                }
            }
        }
    };
    match tokio::time::timeout(LOOKUP_TIMEOUT, lookup).await {
        Ok(Ok(items)) => GateAnswer::Items(items),
        Ok(Err(why)) => GateAnswer::Unavailable(why),
        Err(_elapsed) => GateAnswer::Unavailable(format!(
            "no answer within {}",
            autopilot_api::duration::format(LOOKUP_TIMEOUT)
        )),
    }
}

/// The most objects one page of a `kubernetes` gate's list asks for: a list is read in pages
/// of at most this many, and reading stops at the first page that takes it over a cap, so at
/// most the caps plus one page are ever read (a whole list of a big kind was read before the
/// byte cap applied).
pub const PAGE_OBJECTS: usize = 100;

/// List the objects of a kind, at most [`MAX_GATE_OBJECTS`] and [`MAX_LIST_BYTES`], in pages
/// (see [`PAGE_OBJECTS`]).
async fn list(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    label_selector: Option<&str>,
    field_selector: Option<&str>,
) -> Result<Vec<serde_json::Value>, String> {
    let (group, version) = match api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", api_version),
    };
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, capabilities) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .map_err(|err| format!("{api_version} {kind} is not served: {err}"))?;
    let api: Api<DynamicObject> = match (namespace, capabilities.scope) {
        (Some(namespace), kube::discovery::Scope::Namespaced) => {
            Api::namespaced_with(client.clone(), namespace, &resource)
        }
        (Some(_) | None, kube::discovery::Scope::Namespaced | kube::discovery::Scope::Cluster) => {
            Api::all_with(client.clone(), &resource)
        }
    };
    let plural = resource.plural.as_str();
    read_pages(plural, |token, limit| {
        let mut params = ListParams::default().limit(u32::try_from(limit).unwrap_or(u32::MAX));
        if let Some(selector) = label_selector {
            params = params.labels(selector);
        }
        if let Some(selector) = field_selector {
            params = params.fields(selector);
        }
        if let Some(token) = token {
            params = params.continue_token(&token);
        }
        let api = api.clone();
        async move {
            let listed = api.list(&params).await.map_err(|err| match err {
                kube::Error::Api(status) if status.code == 403 => format!(
                    "the controller may not list {plural}: {} (grant it list on this kind, see \
                     docs/updating-a-cluster.md \"Gates\")",
                    status.message
                ),
                other => format!("listing {plural}: {other}"),
            })?;
            let next = listed.metadata.continue_.filter(|token| !token.is_empty());
            let mut items = Vec::with_capacity(listed.items.len());
            for mut object in listed.items {
                object.metadata.managed_fields = None;
                let mut value = serde_json::to_value(&object).map_err(|err| err.to_string())?;
                if let Some(map) = value.as_object_mut() {
                    map.insert("apiVersion".to_owned(), api_version.into());
                    map.insert("kind".to_owned(), kind.into());
                }
                items.push(value);
            }
            Ok((items, next))
        }
    })
    .await
}

/// Read a list of `plural` page by page: `page(continue, limit)` answers the next page (at
/// most `limit` objects) and the token of the one after it. Stops with why at the first page
/// that takes the list over [`MAX_GATE_OBJECTS`] or [`MAX_LIST_BYTES`] (as JSON), so it
/// never asks for more than one page past a cap.
async fn read_pages<F, Fut>(plural: &str, mut page: F) -> Result<Vec<serde_json::Value>, String>
where
    F: FnMut(Option<String>, usize) -> Fut,
    Fut: std::future::Future<Output = Result<(Vec<serde_json::Value>, Option<String>), String>>,
{
    let mut items: Vec<serde_json::Value> = Vec::new();
    let mut bytes = 0;
    let mut token = None;
    loop {
        // Never more than the cap in all: a list that fills it and goes on is over it.
        let limit = PAGE_OBJECTS.min(MAX_GATE_OBJECTS - items.len());
        let (page, next) = page(token.take(), limit).await?;
        for value in page {
            bytes += value.to_string().len();
            if bytes > MAX_LIST_BYTES {
                return Err(format!(
                    "the matching {plural} are over {} MiB as JSON; a kubernetes gate reads at \
                     most that (narrow the namespace or the selectors)",
                    MAX_LIST_BYTES >> 20
                ));
            }
            items.push(value);
        }
        // (A server that ignored the limit may have sent more.)
        if items.len() > MAX_GATE_OBJECTS || (items.len() == MAX_GATE_OBJECTS && next.is_some()) {
            return Err(format!(
                "more than {MAX_GATE_OBJECTS} {plural} match; a kubernetes gate reads at most \
                 {MAX_GATE_OBJECTS} (narrow the namespace or the selectors)"
            ));
        }
        match next {
            Some(next) => token = Some(next),
            None => return Ok(items),
        }
    }
}

/// An error with its sources, `: `-joined.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    /// A list of `count` objects of `size` bytes each (as JSON), served in pages; records the
    /// limit of each page asked for.
    struct Pages {
        count: usize,
        size: usize,
        asked: RefCell<Vec<usize>>,
    }

    impl Pages {
        fn new(count: usize, size: usize) -> Self {
            Self { count, size, asked: RefCell::new(Vec::new()) }
        }

        async fn page(
            &self,
            token: Option<String>,
            limit: usize,
        ) -> Result<(Vec<serde_json::Value>, Option<String>), String> {
            self.asked.borrow_mut().push(limit);
            let from: usize = token.map_or(0, |t| t.parse().expect("a token of ours"));
            let to = (from + limit).min(self.count);
            // A JSON string of `size` bytes: its text plus the two quotes.
            let object = serde_json::Value::String("x".repeat(self.size - 2));
            let next = (to < self.count).then(|| to.to_string());
            Ok((vec![object; to - from], next))
        }

        async fn read(&self) -> Result<Vec<serde_json::Value>, String> {
            read_pages("pods", |token, limit| self.page(token, limit)).await
        }

        fn pages_read(&self) -> usize {
            self.asked.borrow().len()
        }
    }

    #[tokio::test]
    async fn a_list_within_the_caps_is_read_whole_in_pages() {
        let pages = Pages::new(250, 100);
        assert_eq!(pages.read().await.expect("within the caps").len(), 250);
        assert_eq!(*pages.asked.borrow(), [100, 100, 100]);
        let exactly = Pages::new(MAX_GATE_OBJECTS, 100);
        assert_eq!(exactly.read().await.expect("at the cap").len(), MAX_GATE_OBJECTS);
    }

    #[tokio::test]
    async fn a_list_over_the_byte_cap_stops_at_the_page_that_crosses_it() {
        // 400 objects of 16 KiB: 6.25 MiB in all, over the cap within the third page.
        let pages = Pages::new(400, 16 << 10);
        let why = pages.read().await.expect_err("over the byte cap");
        assert_eq!(
            why,
            "the matching pods are over 4 MiB as JSON; a kubernetes gate reads at most that \
             (narrow the namespace or the selectors)"
        );
        assert_eq!(pages.pages_read(), 3, "no page read after the one that crossed the cap");
    }

    #[tokio::test]
    async fn a_list_over_the_object_cap_reads_no_page_past_it() {
        let pages = Pages::new(10_000, 10);
        let why = pages.read().await.expect_err("over the object cap");
        assert!(why.starts_with("more than 500 pods match; a kubernetes gate reads at most 500"));
        assert_eq!(*pages.asked.borrow(), [100, 100, 100, 100, 100]);
    }
}

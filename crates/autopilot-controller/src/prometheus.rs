//! The leader's Prometheus client: one instant PromQL query, for `prometheus` health gates
//! (DESIGN §15).
//!
//! [`instant_query`] sends `GET <base>/api/v1/query?query=<promql>` with the project's
//! HTTP(S) client ([`HttpsClient`]: `http://` for a Prometheus on the same host or network,
//! `https://` with the caller's trust roots), reads at most [`MAX_RESPONSE_BYTES`] of the
//! answer within the caller's timeout, and returns the result as an [`InstantVector`]:
//!
//! ```json
//! {"status": "success",
//!  "data": {"resultType": "vector",
//!           "result": [{"metric": {"__name__": "up", "job": "k0s"}, "value": [1764160000.5, "1"]}]}}
//! ```
//!
//! becomes one [`Sample`] per element of `result`, the value parsed as `f64` (Prometheus
//! sends it as a string so that `NaN` and `±Inf` survive JSON). A `scalar` result becomes one
//! sample without labels, so a gate's expression reads the same whatever the query returns.
//! `matrix` (a range selector such as `up[5m]`) and `string` results are refused: a gate
//! judges an instant vector. [`InstantVector::to_cel_json`] is what CEL sees (see there).
//!
//! Every failure is a [`QueryError`] naming the URL it asked and why: the HTTP status with
//! Prometheus's own `errorType` and `error` when the body has them, a timeout, an answer
//! over the size limit, a body that is not the JSON Prometheus answers with.

use std::collections::BTreeMap;
use std::time::Duration;

use autopilot_shell::https::HttpsClient;
use bytes::Bytes;
use http::header::{ACCEPT, USER_AGENT};
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt as _, Empty, LengthLimitError, Limited};
use serde::Deserialize;
use thiserror::Error;

/// The largest answer read, in bytes (1 MiB). A gate's query should select a handful of
/// series; a query that matches the whole fleet's every series is a mistake this limit
/// reports instead of buffering.
pub const MAX_RESPONSE_BYTES: usize = 1024 * 1024;

/// The path of Prometheus's instant-query endpoint, joined onto the base URL's path.
pub const QUERY_PATH: &str = "api/v1/query";

/// Why an instant query failed. Every variant names the URL asked.
#[derive(Debug, Error)]
pub enum QueryError {
    /// The base URL is not an `http://` or `https://` URL with a host.
    #[error("prometheus url {url:?} is invalid: {reason}")]
    BadUrl {
        /// The URL as given (or as built from it).
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No answer: connecting failed, TLS failed, or the connection broke.
    #[error("querying {url} failed")]
    Request {
        /// The query URL.
        url: String,
        /// The client's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The whole exchange, body included, did not finish in time.
    #[error("querying {url}: no complete answer within {timeout:?}")]
    Timeout {
        /// The query URL.
        url: String,
        /// The timeout given.
        timeout: Duration,
    },
    /// The answer is larger than [`MAX_RESPONSE_BYTES`].
    #[error("querying {url}: the answer exceeds the limit of {limit} bytes")]
    TooLarge {
        /// The query URL.
        url: String,
        /// The limit in bytes.
        limit: usize,
    },
    /// Reading the body failed.
    #[error("querying {url}: reading the answer failed")]
    Body {
        /// The query URL.
        url: String,
        /// What went wrong.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Prometheus said no: a non-200 status or `"status": "error"` (bad PromQL is
    /// `400 bad_data`, a query that timed out inside Prometheus `503 timeout`).
    #[error("querying {url}: {}", failure_text(*status, error_type.as_deref(), error.as_deref()))]
    Failed {
        /// The query URL.
        url: String,
        /// The HTTP status.
        status: StatusCode,
        /// Prometheus's `errorType`, if the body had one.
        error_type: Option<String>,
        /// Prometheus's `error`, if the body had one.
        error: Option<String>,
    },
    /// A 200 answer that is not Prometheus's JSON envelope, or whose result does not have the
    /// shape its `resultType` promises.
    #[error("querying {url}: the answer is not a Prometheus query result: {reason}")]
    NotJson {
        /// The query URL.
        url: String,
        /// What did not parse.
        reason: String,
    },
    /// The query returned a `matrix` or `string`, which a gate cannot judge.
    #[error(
        "querying {url}: the result is a {result_type}, not an instant vector or scalar \
         (a range selector like `up[5m]` needs a function such as `max_over_time`)"
    )]
    Unsupported {
        /// The query URL.
        url: String,
        /// The `resultType` Prometheus answered with.
        result_type: String,
    },
}

fn failure_text(status: StatusCode, error_type: Option<&str>, error: Option<&str>) -> String {
    let mut text = format!("prometheus answered {status}");
    match (error_type, error) {
        (Some(kind), Some(error)) => text.push_str(&format!(" ({kind}: {error})")),
        (None, Some(error)) => text.push_str(&format!(" ({error})")),
        (Some(kind), None) => text.push_str(&format!(" ({kind})")),
        (None, None) => {}
    }
    text
}

/// One series of an instant vector.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The series' labels, `__name__` included when the query kept it.
    pub metric: BTreeMap<String, String>,
    /// The evaluation time, in seconds since the Unix epoch.
    pub timestamp: f64,
    /// The value (may be `NaN` or infinite).
    pub value: f64,
}

/// The result of an instant query: the samples of a `vector`, or the one label-less sample
/// of a `scalar`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InstantVector {
    /// The samples, in Prometheus's order.
    pub samples: Vec<Sample>,
    /// Prometheus's `warnings` (e.g. about a query that touched too many series), if any.
    pub warnings: Vec<String>,
}

impl InstantVector {
    /// What a gate's CEL expression sees: a list with one map per sample,
    /// `{"metric": {<label>: <value>, ...}, "value": <number>}`, so that
    /// `result.all(s, s.value == 1.0)` or `result.exists(s, s.metric.node == "worker-0")`
    /// read naturally. JSON has no `NaN` or infinity: such a value becomes `null` (which no
    /// numeric comparison accepts, so a gate comparing it fails rather than passes). The
    /// timestamps are left out: every sample of one instant query has the same one.
    pub fn to_cel_json(&self) -> serde_json::Value {
        self.samples
            .iter()
            .map(|sample| {
                serde_json::json!({
                    "metric": sample.metric,
                    "value": serde_json::Number::from_f64(sample.value),
                })
            })
            .collect()
    }
}

/// Runs the instant query `promql` against the Prometheus at `base_url` (e.g.
/// `http://127.0.0.1:9090`, or `https://monitoring.example/prometheus` behind a path
/// prefix), giving the whole exchange `timeout`.
pub async fn instant_query(
    client: &HttpsClient,
    base_url: &str,
    promql: &str,
    timeout: Duration,
) -> Result<InstantVector, QueryError> {
    let uri = query_uri(base_url, promql)?;
    let shown = uri.to_string();
    let request = Request::builder()
        .method(Method::GET)
        .uri(uri)
        .header(ACCEPT, "application/json")
        .header(USER_AGENT, concat!("k0s-autopilot/", env!("CARGO_PKG_VERSION")))
        .body(Empty::<Bytes>::new())
        .map_err(|e| QueryError::BadUrl { url: shown.clone(), reason: e.to_string() })?;
    let exchange = async {
        let response = client
            .request(request)
            .await
            .map_err(|source| QueryError::Request { url: shown.clone(), source: source.into() })?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_RESPONSE_BYTES).collect().await.map_err(
            |source| {
                if source.is::<LengthLimitError>() {
                    QueryError::TooLarge { url: shown.clone(), limit: MAX_RESPONSE_BYTES }
                } else {
                    QueryError::Body { url: shown.clone(), source }
                }
            },
        )?;
        parse_answer(&shown, status, &body.to_bytes())
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| QueryError::Timeout { url: shown.clone(), timeout })?
}

/// `<base>/api/v1/query?query=<promql, percent-encoded>`. The base keeps its path (a
/// Prometheus behind a path prefix); its query and fragment are dropped.
pub fn query_uri(base_url: &str, promql: &str) -> Result<Uri, QueryError> {
    let bad = |reason: String| QueryError::BadUrl { url: base_url.to_owned(), reason };
    let mut url = url::Url::parse(base_url.trim()).map_err(|e| bad(e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad(format!("the scheme must be http or https, not {:?}", url.scheme())));
    }
    if !url.has_host() {
        return Err(bad("it has no host".to_owned()));
    }
    let path = format!("{}/{QUERY_PATH}", url.path().trim_end_matches('/'));
    url.set_path(&path);
    url.set_fragment(None);
    url.set_query(None);
    url.query_pairs_mut().append_pair("query", promql);
    Uri::try_from(url.as_str()).map_err(|e| bad(e.to_string()))
}

/// Prometheus's JSON envelope (`/api/v1/*`).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default)]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    warnings: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Data {
    result_type: String,
    result: serde_json::Value,
}

#[derive(Deserialize)]
struct VectorElement {
    #[serde(default)]
    metric: BTreeMap<String, String>,
    value: (f64, String),
}

/// Judges one answer of `/api/v1/query`: `status` is the HTTP status, `body` the whole body.
pub fn parse_answer(
    url: &str,
    status: StatusCode,
    body: &[u8],
) -> Result<InstantVector, QueryError> {
    let not_json = |reason: String| QueryError::NotJson { url: url.to_owned(), reason };
    let envelope = serde_json::from_slice::<Envelope>(body);
    let failed = |envelope: Option<&Envelope>| QueryError::Failed {
        url: url.to_owned(),
        status,
        error_type: envelope.and_then(|e| e.error_type.clone()),
        error: envelope.and_then(|e| e.error.clone()),
    };
    let envelope = match envelope {
        Ok(envelope) if status == StatusCode::OK && envelope.status == "success" => envelope,
        Ok(envelope) => return Err(failed(Some(&envelope))),
        Err(_) if status != StatusCode::OK => return Err(failed(None)),
        Err(err) => return Err(not_json(err.to_string())),
    };
    let Envelope { data, warnings, .. } = envelope;
    let data = data.ok_or_else(|| not_json("a success without `data`".to_owned()))?;
    let samples = match data.result_type.as_str() {
        "vector" => {
            let elements: Vec<VectorElement> = serde_json::from_value(data.result)
                .map_err(|e| not_json(format!("a vector result: {e}")))?;
            elements
                .into_iter()
                .map(|VectorElement { metric, value: (timestamp, value) }| {
                    Ok(Sample { metric, timestamp, value: parse_value(&value).map_err(&not_json)? })
                })
                .collect::<Result<Vec<_>, _>>()?
        }
        "scalar" => {
            let (timestamp, value): (f64, String) = serde_json::from_value(data.result)
                .map_err(|e| not_json(format!("a scalar result: {e}")))?;
            let value = parse_value(&value).map_err(&not_json)?;
            vec![Sample { metric: BTreeMap::new(), timestamp, value }]
        }
        other => {
            return Err(QueryError::Unsupported {
                url: url.to_owned(),
                result_type: other.to_owned(),
            });
        }
    };
    Ok(InstantVector { samples, warnings })
}

/// A sample value as Prometheus writes it: a decimal, `NaN`, `+Inf` or `-Inf`.
fn parse_value(text: &str) -> Result<f64, String> {
    match text {
        "NaN" => Ok(f64::NAN),
        "+Inf" | "Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        _ => text.parse().map_err(|_| format!("the sample value {text:?} is not a number")),
    }
}

#[cfg(test)]
mod tests;

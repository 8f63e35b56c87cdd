//! A stand-in API server for unit tests of request shapes (feature `fake-api`, for
//! dev-dependencies only): a `kube::Client` whose requests a function answers, each one
//! recorded. What the autopilot does is proven against the real control plane (the
//! `integration` crate); this backs only narrow tests of what a shell sends, in which order,
//! and what it does with an answer.

use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;

/// One request the fake API server received.
#[derive(Clone, Debug)]
pub struct Request {
    /// `GET`, `POST`, `PUT`, `PATCH`, `DELETE`.
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The JSON body (`null` when there is none or it is not JSON).
    pub body: Value,
}

/// The fake API server: the requests it received, in order. Clones share them.
#[derive(Clone, Debug, Default)]
pub struct FakeApiServer {
    seen: Arc<Mutex<Vec<Request>>>,
}

impl FakeApiServer {
    /// A client whose requests `answer` answers with a status code and a JSON body; it is
    /// given each request and the requests received before it.
    pub fn client<F>(&self, answer: F) -> kube::Client
    where
        F: Fn(&Request, &[Request]) -> (u16, Value) + Clone + Send + Sync + 'static,
    {
        let server = self.clone();
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let (server, answer) = (server.clone(), answer.clone());
            async move {
                let (parts, body) = request.into_parts();
                let bytes = body.collect_bytes().await?;
                let request = Request {
                    method: parts.method.to_string(),
                    path: parts.uri.path().to_string(),
                    body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                };
                let (code, body) = {
                    let mut seen = server.seen.lock().unwrap_or_else(PoisonError::into_inner);
                    let answered = answer(&request, &seen);
                    seen.push(request);
                    answered
                };
                let response = http::Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(serde_json::to_vec(&body)?))?;
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(response)
            }
        });
        kube::Client::new(service, "default")
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The requests with `method`, in order.
    pub fn requests_with(&self, method: &str) -> Vec<Request> {
        self.requests().into_iter().filter(|r| r.method == method).collect()
    }

    /// Whether a `method` request for `path` was received.
    pub fn saw(&self, method: &str, path: &str) -> bool {
        self.requests().iter().any(|r| r.method == method && r.path == path)
    }
}

/// A `Status` failure body, as the API server answers with `code` (e.g. 404, `NotFound`).
pub fn status(code: u16, reason: &str) -> Value {
    serde_json::json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
                       "code": code, "reason": reason, "message": reason})
}

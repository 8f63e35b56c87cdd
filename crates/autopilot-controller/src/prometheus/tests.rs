//! The answer parsing on canned bodies, and [`instant_query`] against a loopback server that
//! answers one canned HTTP response.

use std::net::SocketAddr;

use autopilot_shell::https::{self, HttpsClientBuilder};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::*;

const URL: &str = "http://127.0.0.1:9090/api/v1/query?query=up";

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

#[test]
fn a_vector_becomes_one_sample_per_series_with_its_labels_and_value() {
    let body = br#"{"status":"success","data":{"resultType":"vector","result":[
        {"metric":{"__name__":"up","instance":"127.0.0.1:1","node":"worker-0"},"value":[1764160000.5,"1"]},
        {"metric":{"__name__":"up","instance":"127.0.0.1:2","node":"worker-1"},"value":[1764160000.5,"0"]}]}}"#;
    let vector = parse_answer(URL, StatusCode::OK, body).unwrap();
    assert_eq!(
        vector.samples,
        [
            Sample {
                metric: labels(&[
                    ("__name__", "up"),
                    ("instance", "127.0.0.1:1"),
                    ("node", "worker-0")
                ]),
                timestamp: 1_764_160_000.5,
                value: 1.0,
            },
            Sample {
                metric: labels(&[
                    ("__name__", "up"),
                    ("instance", "127.0.0.1:2"),
                    ("node", "worker-1")
                ]),
                timestamp: 1_764_160_000.5,
                value: 0.0,
            },
        ]
    );
    assert!(vector.warnings.is_empty());
    assert_eq!(
        vector.to_cel_json(),
        serde_json::json!([
            {"metric": {"__name__": "up", "instance": "127.0.0.1:1", "node": "worker-0"}, "value": 1.0},
            {"metric": {"__name__": "up", "instance": "127.0.0.1:2", "node": "worker-1"}, "value": 0.0},
        ])
    );
}

#[test]
fn an_empty_vector_is_no_samples_and_an_empty_list() {
    let body = br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
    let vector = parse_answer(URL, StatusCode::OK, body).unwrap();
    assert!(vector.samples.is_empty());
    assert_eq!(vector.to_cel_json(), serde_json::json!([]));
}

#[test]
fn a_scalar_becomes_one_sample_without_labels() {
    let body = br#"{"status":"success","data":{"resultType":"scalar","result":[1764160000,"0.25"]},
                   "warnings":["this query is slow"]}"#;
    let vector = parse_answer(URL, StatusCode::OK, body).unwrap();
    assert_eq!(
        vector.samples,
        [Sample { metric: BTreeMap::new(), timestamp: 1_764_160_000.0, value: 0.25 }]
    );
    assert_eq!(vector.warnings, ["this query is slow"]);
    assert_eq!(vector.to_cel_json(), serde_json::json!([{"metric": {}, "value": 0.25}]));
}

#[test]
fn nan_and_infinities_are_read_and_become_null_for_cel() {
    let body = br#"{"status":"success","data":{"resultType":"vector","result":[
        {"metric":{"a":"nan"},"value":[1,"NaN"]},
        {"metric":{"a":"inf"},"value":[1,"+Inf"]},
        {"metric":{"a":"-inf"},"value":[1,"-Inf"]}]}}"#;
    let vector = parse_answer(URL, StatusCode::OK, body).unwrap();
    assert!(vector.samples[0].value.is_nan());
    assert_eq!(vector.samples[1].value, f64::INFINITY);
    assert_eq!(vector.samples[2].value, f64::NEG_INFINITY);
    let json = vector.to_cel_json();
    assert!(json.as_array().unwrap().iter().all(|s| s["value"].is_null()), "{json}");
}

#[test]
fn an_error_body_names_the_status_error_type_and_error() {
    let body = br#"{"status":"error","errorType":"bad_data","error":"invalid parameter \"query\": 1:4: parse error: unexpected <op:+>"}"#;
    let err = parse_answer(URL, StatusCode::BAD_REQUEST, body).unwrap_err();
    assert!(
        matches!(&err, QueryError::Failed { status, error_type: Some(t), .. }
            if *status == StatusCode::BAD_REQUEST && t == "bad_data"),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains(URL), "{message}");
    assert!(message.contains("400 Bad Request"), "{message}");
    assert!(message.contains("bad_data: invalid parameter"), "{message}");
}

#[test]
fn a_non_200_status_without_json_is_a_failure_naming_the_status() {
    let err = parse_answer(URL, StatusCode::BAD_GATEWAY, b"<html>bad gateway</html>").unwrap_err();
    assert!(matches!(err, QueryError::Failed { error: None, error_type: None, .. }), "{err:?}");
    assert_eq!(err.to_string(), format!("querying {URL}: prometheus answered 502 Bad Gateway"));
}

#[test]
fn a_200_with_status_error_is_a_failure() {
    let body = br#"{"status":"error","errorType":"execution","error":"boom"}"#;
    let err = parse_answer(URL, StatusCode::OK, body).unwrap_err();
    assert!(err.to_string().ends_with("prometheus answered 200 OK (execution: boom)"), "{err}");
}

#[test]
fn bad_json_is_an_error_naming_the_url() {
    let err = parse_answer(URL, StatusCode::OK, b"Prometheus Server is Ready.").unwrap_err();
    assert!(matches!(err, QueryError::NotJson { .. }), "{err:?}");
    assert!(err.to_string().contains(URL), "{err}");
}

#[test]
fn a_result_of_the_wrong_shape_is_an_error() {
    let body = br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"one"]}]}}"#;
    let err = parse_answer(URL, StatusCode::OK, body).unwrap_err();
    assert!(err.to_string().contains(r#"the sample value "one" is not a number"#), "{err}");
    let body = br#"{"status":"success","data":{"resultType":"vector","result":{"oops":1}}}"#;
    assert!(matches!(parse_answer(URL, StatusCode::OK, body), Err(QueryError::NotJson { .. })));
}

#[test]
fn a_matrix_or_string_result_is_refused_naming_the_type() {
    let body = br#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"1"]]}]}}"#;
    let err = parse_answer(URL, StatusCode::OK, body).unwrap_err();
    assert!(
        matches!(&err, QueryError::Unsupported { result_type, .. } if result_type == "matrix"),
        "{err:?}"
    );
    let body = br#"{"status":"success","data":{"resultType":"string","result":[1,"x"]}}"#;
    assert!(matches!(parse_answer(URL, StatusCode::OK, body), Err(QueryError::Unsupported { .. })));
}

#[test]
fn the_query_url_keeps_the_base_path_and_encodes_the_query() {
    let uri = query_uri("http://127.0.0.1:9090", r#"up{job="k0s"} == 1"#).unwrap();
    assert_eq!(
        uri.to_string(),
        "http://127.0.0.1:9090/api/v1/query?query=up%7Bjob%3D%22k0s%22%7D+%3D%3D+1"
    );
    let uri = query_uri("https://monitoring.example/prometheus/?x=1#top", "a+b").unwrap();
    assert_eq!(uri.to_string(), "https://monitoring.example/prometheus/api/v1/query?query=a%2Bb");
}

#[test]
fn a_base_url_that_is_not_http_is_refused() {
    for base in ["ftp://127.0.0.1/", "127.0.0.1:9090", "unix:/run/prometheus.sock"] {
        let err = query_uri(base, "up").unwrap_err();
        assert!(matches!(err, QueryError::BadUrl { .. }), "{base}: {err:?}");
        assert!(err.to_string().contains(base), "{err}");
    }
}

/// Answers every connection on a loopback port with `response` (raw HTTP), after reading the
/// request head; `None` never answers.
async fn canned_server(response: Option<Vec<u8>>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else { return };
            let response = response.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0_u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                match response {
                    Some(response) => {
                        let _ = socket.write_all(&response).await;
                    }
                    None => std::future::pending::<()>().await,
                }
            });
        }
    });
    address
}

fn http_response(status: &str, body: &[u8]) -> Vec<u8> {
    let mut response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    response.extend_from_slice(body);
    response
}

fn client() -> HttpsClient {
    HttpsClientBuilder::new(https::system_roots()).build().unwrap()
}

#[tokio::test]
async fn a_query_over_plain_http_returns_the_vector() {
    let body = br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"node":"n"},"value":[1,"3"]}]}}"#;
    let address = canned_server(Some(http_response("200 OK", body))).await;
    let vector =
        instant_query(&client(), &format!("http://{address}"), "up", Duration::from_secs(10))
            .await
            .unwrap();
    assert_eq!(vector.to_cel_json(), serde_json::json!([{"metric": {"node": "n"}, "value": 3.0}]));
}

#[tokio::test]
async fn an_answer_over_the_limit_is_an_error_naming_the_limit() {
    let body = vec![b' '; MAX_RESPONSE_BYTES + 1];
    let address = canned_server(Some(http_response("200 OK", &body))).await;
    let err = instant_query(&client(), &format!("http://{address}"), "up", Duration::from_secs(10))
        .await
        .unwrap_err();
    assert!(matches!(err, QueryError::TooLarge { limit: MAX_RESPONSE_BYTES, .. }), "{err:?}");
    assert!(err.to_string().contains("exceeds the limit of 1048576 bytes"), "{err}");
    assert!(err.to_string().contains(&address.to_string()), "{err}");
}

#[tokio::test]
async fn a_chunked_answer_over_the_limit_is_cut_off_as_it_streams() {
    // No Content-Length to refuse up front: the limit applies to the bytes as they arrive.
    let chunk = vec![b' '; MAX_RESPONSE_BYTES / 4];
    let mut response = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                         Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        .to_vec();
    for _ in 0..5 {
        response.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        response.extend_from_slice(&chunk);
        response.extend_from_slice(b"\r\n");
    }
    response.extend_from_slice(b"0\r\n\r\n");
    let address = canned_server(Some(response)).await;
    let err = instant_query(&client(), &format!("http://{address}"), "up", Duration::from_secs(10))
        .await
        .unwrap_err();
    assert!(matches!(err, QueryError::TooLarge { limit: MAX_RESPONSE_BYTES, .. }), "{err:?}");
}

#[tokio::test]
async fn a_server_that_never_answers_is_a_timeout_naming_the_url() {
    let address = canned_server(None).await;
    let err =
        instant_query(&client(), &format!("http://{address}"), "up", Duration::from_millis(200))
            .await
            .unwrap_err();
    assert!(matches!(err, QueryError::Timeout { .. }), "{err:?}");
    assert!(err.to_string().contains(&format!("http://{address}/api/v1/query?query=up")), "{err}");
}

#[tokio::test]
async fn a_refused_connection_is_a_request_error_naming_the_url() {
    // Bind and drop: nothing listens on that port any more.
    let address = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let err = instant_query(&client(), &format!("http://{address}"), "up", Duration::from_secs(10))
        .await
        .unwrap_err();
    assert!(matches!(err, QueryError::Request { .. }), "{err:?}");
    assert!(err.to_string().contains(&address.to_string()), "{err}");
}

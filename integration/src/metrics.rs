//! Scraping a node's `--metrics-address` ([`crate::K0sCommand::with_metrics`]): one plain
//! HTTP/1.1 `GET /metrics`, the OpenMetrics text parsed into samples a test can query.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// How long one scrape may take.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

/// One sample: a metric name (with its `_total`/`_bucket`/... suffix), its labels and value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The sample's name as exposed, e.g. `k0s_autopilot_node_updates_total`.
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its value.
    pub value: f64,
}

/// What one scrape returned.
#[derive(Clone, Debug, Default)]
pub struct Scrape {
    /// Every sample, in the order exposed.
    pub samples: Vec<Sample>,
    /// The text as served (for assertion messages).
    pub text: String,
}

impl Scrape {
    /// The sum of the samples named `name` whose labels include every pair of `labels`;
    /// `None` if there is no such sample.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let matching: Vec<f64> = self
            .samples
            .iter()
            .filter(|s| s.name == name)
            .filter(|s| labels.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(v)))
            .map(|s| s.value)
            .collect();
        (!matching.is_empty()).then(|| matching.iter().sum())
    }

    /// Like [`Scrape::value`], with 0 for no such sample (a counter family that has not
    /// counted anything yet shows no sample).
    pub fn value_or_zero(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.value(name, labels).unwrap_or(0.0)
    }
}

/// `GET http://<address>/metrics`, parsed.
pub async fn scrape(address: SocketAddr) -> anyhow::Result<Scrape> {
    let text = tokio::time::timeout(SCRAPE_TIMEOUT, get(address))
        .await
        .with_context(|| format!("scraping {address}: no answer within {SCRAPE_TIMEOUT:?}"))??;
    let samples = parse(&text).with_context(|| format!("parsing the metrics of {address}"))?;
    Ok(Scrape { samples, text })
}

async fn get(address: SocketAddr) -> anyhow::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .with_context(|| format!("connecting to {address}"))?;
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    let answer = String::from_utf8(answer).context("the answer is not UTF-8")?;
    let Some((head, body)) = answer.split_once("\r\n\r\n") else {
        bail!("no end of headers in {answer:?}");
    };
    let status = head.lines().next().unwrap_or_default();
    ensure!(status.starts_with("HTTP/1.1 200"), "{address} answered {status:?}");
    let chunked = head
        .lines()
        .any(|l| l.to_ascii_lowercase().starts_with("transfer-encoding:") && l.contains("chunked"));
    Ok(if chunked { dechunk(body)? } else { body.to_owned() })
}

/// The body of a `Transfer-Encoding: chunked` answer.
fn dechunk(mut body: &str) -> anyhow::Result<String> {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n").context("a chunk without a size line")?;
        let size = usize::from_str_radix(size.trim(), 16).context("a bad chunk size")?;
        if size == 0 {
            return Ok(out);
        }
        ensure!(rest.len() >= size, "a truncated chunk");
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
}

/// The samples of an OpenMetrics/Prometheus text exposition.
pub fn parse(text: &str) -> anyhow::Result<Vec<Sample>> {
    let mut samples = Vec::new();
    for line in text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let (series, value) = line.rsplit_once(' ').with_context(|| format!("line {line:?}"))?;
        let value: f64 = value.parse().with_context(|| format!("the value of {line:?}"))?;
        let (name, labels) = match series.split_once('{') {
            None => (series.to_owned(), BTreeMap::new()),
            Some((name, labels)) => {
                let labels = labels.strip_suffix('}').with_context(|| format!("line {line:?}"))?;
                (name.to_owned(), parse_labels(labels).with_context(|| format!("line {line:?}"))?)
            }
        };
        samples.push(Sample { name, labels, value });
    }
    Ok(samples)
}

/// `a="x",b="y"` (values without escaped quotes, which autopilot's labels never contain).
fn parse_labels(text: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let mut labels = BTreeMap::new();
    let mut rest = text;
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"").context("a label without a value")?;
        let (value, after) = after.split_once('"').context("an unterminated label value")?;
        labels.insert(key.trim_start_matches(',').to_owned(), value.to_owned());
        rest = after.trim_start_matches(',');
    }
    Ok(labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_parsed_with_their_labels() {
        let text = "# HELP k0s_autopilot_is_leader x\n# TYPE k0s_autopilot_is_leader gauge\n\
                    k0s_autopilot_is_leader 1\n\
                    k0s_autopilot_node_updates_total{result=\"completed\"} 2\n\
                    k0s_autopilot_plan_state{plan=\"autopilot\",state=\"Completed\"} 1\n# EOF\n";
        let scrape = Scrape { samples: parse(text).unwrap(), text: text.to_owned() };
        assert_eq!(scrape.value("k0s_autopilot_is_leader", &[]), Some(1.0));
        assert_eq!(
            scrape.value("k0s_autopilot_node_updates_total", &[("result", "completed")]),
            Some(2.0)
        );
        assert_eq!(scrape.value("k0s_autopilot_plan_state", &[("state", "Completed")]), Some(1.0));
        assert_eq!(scrape.value("k0s_autopilot_plan_state", &[("state", "Aborted")]), None);
    }

    #[test]
    fn a_chunked_body_is_joined() {
        assert_eq!(dechunk("3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").unwrap(), "abcde");
    }
}

//! Input generators shared by the fuzz targets (`tests/fuzz.rs` of each crate; feature
//! `fuzz`, never in a build that ships).
//!
//! Two kinds of input: [`json`], arbitrary JSON whose object keys are mostly field names
//! autopilot knows (so the decoders get past the first unknown key), and [`mutated`], a
//! valid document with one value replaced or removed at a random place (so the rules
//! behind a successful decode are reached too). [`cases`] is how many cases each target
//! runs: 10,000 by default, `K0S_FUZZ_CASES` to change it (`cargo xtask fuzz` runs
//! 100,000).

use proptest::prelude::*;
use serde_json::{Map, Value};

/// Cases per fuzz target: `K0S_FUZZ_CASES`, or 10,000.
pub fn cases() -> u32 {
    std::env::var("K0S_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000)
}

/// A proptest configuration running [`cases`] cases, without failure persistence files
/// (a failure prints its minimal input; the targets are reproducible from that).
pub fn config() -> ProptestConfig {
    ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() }
}

/// Field names and values of the autopilot API, the signal envelope and the update server's
/// answers: the vocabulary of generated keys and strings.
const WORDS: &[&str] = &[
    "apiVersion",
    "kind",
    "metadata",
    "name",
    "spec",
    "status",
    "id",
    "timestamp",
    "commands",
    "k0supdate",
    "airgapupdate",
    "preflight",
    "version",
    "forceupdate",
    "platforms",
    "url",
    "sha256",
    "targets",
    "controllers",
    "workers",
    "discovery",
    "static",
    "nodes",
    "selector",
    "labels",
    "fields",
    "limits",
    "concurrent",
    "maxFailures",
    "canary",
    "soak",
    "progressTimeout",
    "drain",
    "drainOptions",
    "force",
    "deleteEmptydirData",
    "gracePeriod",
    "skipWaitForDeleteTimeout",
    "podSelector",
    "runGeneration",
    "planId",
    "created",
    "command",
    "runId",
    "state",
    "reason",
    "channel",
    "updateServer",
    "upgradeStrategy",
    "type",
    "periodic",
    "cron",
    "days",
    "startTime",
    "length",
    "planSpec",
    "workerNodes",
    "linux-amd64",
    "linux-arm64",
    "autopilot",
    "v1.35.1+k0s.0",
    "v1.36.0",
    "25%",
    "0%",
    "-1",
    "1h30m",
    "10m",
    "0s",
    "https://127.0.0.1/k0s",
    "http://",
    "Downloading",
    "Cordoning",
    "ApplyingUpdate",
    "Restart",
    "UnCordoning",
    "Completed",
    "Failed",
    "FailedDownload",
    "Plan",
    "Schedulable",
    "autopilot.k0sproject.io/v1beta2",
    "k8s.io/v1",
    "",
    " ",
    "\u{0}",
    "\u{202e}",
    "../..",
];

/// A string: mostly API vocabulary, sometimes anything.
pub fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::sample::select(WORDS).prop_map(str::to_owned),
        1 => any::<String>(),
        1 => "[a-z0-9.:/%+_-]{0,24}",
    ]
}

/// A JSON number: small and huge, negative, fractional.
fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        (-3i64..300).prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
    ]
}

/// Arbitrary JSON, up to `depth` levels of arrays and objects.
pub fn json(depth: u32) -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        word().prop_map(Value::String),
    ];
    leaf.prop_recursive(depth, 64, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            proptest::collection::vec((word(), inner), 0..6)
                .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>())),
        ]
    })
    .boxed()
}

/// `doc` with one place changed: its value replaced by arbitrary JSON, or the entry removed.
/// Every place (the root, each object member, each array element) can be chosen.
pub fn mutated(doc: Value) -> impl Strategy<Value = Value> {
    let places = count_places(&doc);
    (0..places, json(3), any::<bool>()).prop_map(move |(place, replacement, remove)| {
        let mut doc = doc.clone();
        let mut remaining = place;
        mutate_at(&mut doc, &mut remaining, replacement, remove);
        doc
    })
}

fn count_places(value: &Value) -> usize {
    1 + match value {
        Value::Array(items) => items.iter().map(count_places).sum(),
        Value::Object(members) => members.values().map(count_places).sum(),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => 0,
    }
}

/// Walks places in pre-order; at place number `remaining` (counting down), replaces or
/// removes. Returns whether the change was made.
fn mutate_at(value: &mut Value, remaining: &mut usize, replacement: Value, remove: bool) -> bool {
    if *remaining == 0 {
        *value = replacement;
        return true;
    }
    *remaining -= 1;
    match value {
        Value::Array(items) => {
            for i in 0..items.len() {
                if *remaining == 0 && remove {
                    items.remove(i);
                    return true;
                }
                if mutate_at(&mut items[i], remaining, replacement.clone(), remove) {
                    return true;
                }
            }
            false
        }
        Value::Object(members) => {
            let keys: Vec<String> = members.keys().cloned().collect();
            for key in keys {
                if *remaining == 0 && remove {
                    members.remove(&key);
                    return true;
                }
                let Some(member) = members.get_mut(&key) else { continue };
                if mutate_at(member, remaining, replacement.clone(), remove) {
                    return true;
                }
            }
            false
        }
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_place_of_a_document_can_be_replaced() {
        let doc = json!({"a": [1, {"b": 2}], "c": 3});
        let places = count_places(&doc);
        assert_eq!(places, 6, "root, a, a[0], a[1], a[1].b, c");
        let mut changed = std::collections::BTreeSet::new();
        for place in 0..places {
            let mut copy = doc.clone();
            let mut remaining = place;
            assert!(mutate_at(&mut copy, &mut remaining, json!("X"), false), "place {place}");
            assert_ne!(copy, doc);
            changed.insert(copy.to_string());
        }
        assert_eq!(changed.len(), places, "each place is a different change");
    }

    #[test]
    fn a_removal_drops_the_member_or_element() {
        let doc = json!({"a": [1, 2], "c": 3});
        let mut copy = doc.clone();
        // Place 1 is `a`: removed as a whole.
        let mut remaining = 1;
        assert!(mutate_at(&mut copy, &mut remaining, Value::Null, true));
        assert_eq!(copy, json!({"c": 3}));
    }
}

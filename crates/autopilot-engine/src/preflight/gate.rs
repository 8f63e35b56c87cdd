//! The CEL of health gates (DESIGN §15): a `kubernetes` gate's `condition` over `objects`
//! and a `prometheus` gate's over `result`, compiled and bounded like a preflight
//! `boolExpr` (same limits on source, shape and estimated cost) and evaluated by the leader
//! on what the shell fetched.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use super::bounds::{MAX_GATE_OBJECTS, MAX_GATE_SAMPLES, Vocabulary};
use super::compile::compile_cel_in;

/// Which gate a condition belongs to, and so which variables it sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateInput {
    /// `objects`: the listed objects, each as its JSON (`objects[0].status.phase`).
    Objects,
    /// `result`: the query's samples, each `{metric: {label: value}, value: number}`.
    Samples,
}

/// The variables of a `kubernetes` gate's condition.
pub const KUBERNETES_GATE_VARIABLES: [(&str, &str); 2] = [
    ("objects", "list(map): the listed objects, as JSON"),
    ("node", "string: the node's name (empty for a gate that does not name the node)"),
];

/// The variables of a `prometheus` gate's condition.
pub const PROMETHEUS_GATE_VARIABLES: [(&str, &str); 2] = [
    ("result", "list(map): the samples, each {metric: {label: value}, value: number}"),
    ("node", "string: the node's name (empty for a gate that does not name the node)"),
];

impl GateInput {
    fn vocabulary(self) -> Vocabulary {
        match self {
            Self::Objects => Vocabulary::KubernetesGate,
            Self::Samples => Vocabulary::PrometheusGate,
        }
    }

    fn variables(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Self::Objects => &KUBERNETES_GATE_VARIABLES,
            Self::Samples => &PROMETHEUS_GATE_VARIABLES,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Objects => "objects",
            Self::Samples => "result",
        }
    }

    /// The most items the condition is handed.
    pub fn limit(self) -> usize {
        match self {
            Self::Objects => MAX_GATE_OBJECTS,
            Self::Samples => MAX_GATE_SAMPLES,
        }
    }
}

/// Compile a gate's condition: it must parse, stay within the bounds, use only the
/// variables of `input`, and give a bool on an empty list.
pub fn compile_gate_condition(source: &str, input: GateInput) -> Result<cel::Program, String> {
    compile_cel_in(source, input.vocabulary(), input.variables(), &|| context(input, "", &[]))
}

/// Evaluate a gate's condition for `node` on `items`: `Ok(true)` when it holds. A list
/// longer than the gate's limit is refused, naming the limit.
pub fn evaluate_gate(
    source: &str,
    input: GateInput,
    node: &str,
    items: &[serde_json::Value],
) -> Result<bool, String> {
    if items.len() > input.limit() {
        return Err(format!(
            "{} has {} items; a gate reads at most {} (narrow the selector or the query)",
            input.name(),
            items.len(),
            input.limit()
        ));
    }
    let program = compile_gate_condition(source, input)?;
    match program.execute(&context(input, node, items)) {
        Ok(cel::Value::Bool(holds)) => Ok(holds),
        Ok(other) => Err(format!("the condition gave {}, not a bool", other.type_of())),
        Err(error) => Err(format!("the condition failed: {error}")),
    }
}

fn context(
    input: GateInput,
    node: &str,
    items: &[serde_json::Value],
) -> cel::Context<'static, 'static> {
    /// CEL's standard library, built once.
    static STDLIB: LazyLock<Arc<cel::Env>> = LazyLock::new(|| Arc::new(cel::Env::stdlib()));
    let mut context = cel::Context::with_env(Arc::clone(&STDLIB));
    let list: Vec<cel::Value> = items.iter().map(to_cel).collect();
    context.add_variable_from_value(input.name(), cel::Value::List(Arc::new(list)));
    context.add_variable_from_value("node", node.to_owned());
    context
}

/// A JSON value as CEL sees it: integers as `int` (or `uint` past `i64`), other numbers as
/// `double`, objects as maps with string keys.
pub fn to_cel(value: &serde_json::Value) -> cel::Value {
    match value {
        serde_json::Value::Null => cel::Value::Null,
        serde_json::Value::Bool(b) => cel::Value::Bool(*b),
        serde_json::Value::Number(n) => n
            .as_i64()
            .map(cel::Value::Int)
            .or_else(|| n.as_u64().map(cel::Value::UInt))
            .unwrap_or_else(|| cel::Value::Float(n.as_f64().unwrap_or(f64::NAN))),
        serde_json::Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        serde_json::Value::Array(items) => {
            cel::Value::List(Arc::new(items.iter().map(to_cel).collect()))
        }
        serde_json::Value::Object(map) => {
            let map: HashMap<String, cel::Value> =
                map.iter().map(|(k, v)| (k.clone(), to_cel(v))).collect();
            cel::Value::from(map)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_condition_over_objects_reads_nested_fields() {
        let pods = [
            json!({"metadata": {"name": "a"}, "status": {"phase": "Running"}}),
            json!({"metadata": {"name": "b"}, "status": {"phase": "Pending"}}),
        ];
        let all_running = r#"objects.all(p, p.status.phase == "Running")"#;
        assert_eq!(evaluate_gate(all_running, GateInput::Objects, "w1", &pods), Ok(false));
        assert_eq!(evaluate_gate(all_running, GateInput::Objects, "w1", &pods[..1]), Ok(true));
        let named = r#"objects.exists(p, p.metadata.name == "b") && node == "w1""#;
        assert_eq!(evaluate_gate(named, GateInput::Objects, "w1", &pods), Ok(true));
    }

    #[test]
    fn a_condition_over_samples_compares_numbers() {
        let samples = [json!({"metric": {"severity": "critical"}, "value": 2.0})];
        let none_firing = "result.all(s, s.value < 1.0)";
        assert_eq!(evaluate_gate(none_firing, GateInput::Samples, "", &samples), Ok(false));
        assert_eq!(evaluate_gate(none_firing, GateInput::Samples, "", &[]), Ok(true));
        let by_label = r#"result.exists(s, s.metric.severity == "critical")"#;
        assert_eq!(evaluate_gate(by_label, GateInput::Samples, "", &samples), Ok(true));
    }

    #[test]
    fn a_condition_naming_the_other_gates_variable_is_refused_with_the_known_ones() {
        let err = compile_gate_condition("result.size() == 0", GateInput::Objects)
            .expect_err("result is a prometheus gate's");
        assert!(err.contains("unknown variable \"result\"") && err.contains("objects"), "{err}");
        let err = compile_gate_condition("objects", GateInput::Objects).expect_err("a list");
        assert!(err.contains("not a bool"), "{err}");
    }

    #[test]
    fn an_expensive_condition_is_refused_before_it_runs() {
        let nested = "objects.all(a, objects.all(b, a.metadata == b.metadata))";
        let err = compile_gate_condition(nested, GateInput::Objects).expect_err("too costly");
        assert!(err.contains("may cost up to"), "{err}");
    }

    #[test]
    fn more_items_than_the_limit_fail_the_gate_naming_the_limit() {
        let many = vec![json!({}); MAX_GATE_OBJECTS + 1];
        let err = evaluate_gate("true", GateInput::Objects, "", &many).expect_err("too many");
        assert!(err.contains("at most 500"), "{err}");
    }
}

//! Static bounds on a `boolExpr`. The `cel` crate evaluates without a cost limit and cannot
//! be cancelled, so an expression is measured when the plan is compiled and refused if it
//! could cost the leader far more than a real check needs.
//!
//! Three measures, in order: the source length (before parsing); the parsed tree's size,
//! comprehension nesting and literal sizes; and an upper bound on the cost of one
//! evaluation on the largest record a node can report ([`RawRecord::bounded`]).
//!
//! [`RawRecord::bounded`]: autopilot_api::preflight::RawRecord::bounded

use autopilot_api::preflight::{MAX_MESSAGE_BYTES, MAX_MESSAGES, MAX_OUTPUT_BYTES};
use cel::common::ast::{
    ComprehensionExpr, EntryExpr, Expr, IdedEntryExpr, IdedExpr, LiteralValue, operators,
};

/// The longest `boolExpr`, in bytes. Real conditions are one line (the longest example in
/// `docs/preflight-checks.md` is under 60 bytes); 4 KiB leaves room for a long list of
/// accepted versions while keeping the parser's work small.
pub const MAX_CEL_SOURCE_BYTES: usize = 4096;

/// The most expression nodes a `boolExpr` may have once its macros are expanded (one
/// `all`/`exists`/`map` adds about eight). Evaluation visits each node at least once, and
/// every recursive walk over the tree is bounded by it.
pub const MAX_CEL_NODES: usize = 500;

/// How deeply comprehensions (`all`, `exists`, `exists_one`, `map`, `filter`) may nest in
/// each other's bodies. Each level multiplies the work by the length of its list, so two
/// (a message against each of a list of patterns) is the most a check needs. A
/// comprehension over another's result (`results.filter(…).all(…)`) runs after it, not
/// inside it, and does not count.
pub const MAX_CEL_COMPREHENSION_NESTING: usize = 2;

/// The longest string or bytes literal, in bytes: as long as a message a node may report
/// ([`MAX_MESSAGE_BYTES`]), since a literal is compared with one.
pub const MAX_CEL_LITERAL_BYTES: usize = MAX_MESSAGE_BYTES;

/// The most elements of a list literal, or entries of a map literal: a list of accepted
/// versions or patterns, not a data set.
pub const MAX_CEL_LITERAL_ELEMENTS: usize = 100;

/// The highest estimated cost of one evaluation, in steps. A step is one byte (or element)
/// a function reads, compares or builds; evaluating one expression node is
/// [`NODE_STEPS`]. The estimate assumes the largest record a node can report and every
/// comprehension running to the end of its list, so it is an upper bound, often far above
/// what a record costs. Measured on a debug build of the `cel` crate, a step took at most
/// a few nanoseconds, so the limit keeps one evaluation to tens of milliseconds at worst.
/// Real checks stay far below it: `results.exists(m, m.contains("healthy"))` is about
/// 30 000 steps and `results.all(a, results.all(b, a == b))`, two full loops over the
/// largest `results`, about 700 000. It is what refuses an expression that grows a value in a loop
/// (`[stdout].map(s, s + s + s)` chained), which the limits above do not, and two nested
/// loops over 100-element lists with more than a trivial body.
pub const MAX_CEL_COST: u64 = 10_000_000;

/// The steps one expression node costs to evaluate, besides the bytes it touches: the
/// `cel` crate's tree walk spends about as long on a node as on comparing a hundred bytes.
const NODE_STEPS: u64 = 100;

/// The steps charged for each `matches` call on top of the bytes it reads: the `cel` crate
/// compiles the pattern again on every call, which takes about as long as a hundred
/// thousand steps for a short pattern.
const REGEX_COMPILE_COST: u64 = 100_000;

/// The longest node name Kubernetes accepts (a DNS subdomain), the size of `node`.
const MAX_NODE_NAME_BYTES: u64 = 253;

/// Refuse a source longer than [`MAX_CEL_SOURCE_BYTES`], before it is parsed.
pub(super) fn check_source(source: &str) -> Result<(), String> {
    if source.len() > MAX_CEL_SOURCE_BYTES {
        return Err(format!(
            "is {} bytes long; at most {MAX_CEL_SOURCE_BYTES} are allowed",
            source.len()
        ));
    }
    Ok(())
}

/// Refuse a parsed expression over [`MAX_CEL_NODES`], [`MAX_CEL_COMPREHENSION_NESTING`],
/// [`MAX_CEL_LITERAL_BYTES`] or [`MAX_CEL_LITERAL_ELEMENTS`], naming the first exceeded.
pub(super) fn check_shape(expr: &IdedExpr) -> Result<(), String> {
    let mut shape = Shape::default();
    shape.measure(expr, 0);
    let Shape { nodes, nesting, literal_bytes, list_elements, map_entries } = shape;
    if nodes > MAX_CEL_NODES {
        return Err(format!(
            "has {nodes} expression nodes (macros expanded); at most {MAX_CEL_NODES} are allowed"
        ));
    }
    if nesting > MAX_CEL_COMPREHENSION_NESTING {
        return Err(format!(
            "has {nesting} nested comprehensions; at most {MAX_CEL_COMPREHENSION_NESTING} are \
             allowed"
        ));
    }
    if literal_bytes > MAX_CEL_LITERAL_BYTES {
        return Err(format!(
            "has a {literal_bytes}-byte literal; at most {MAX_CEL_LITERAL_BYTES} bytes are allowed"
        ));
    }
    if list_elements > MAX_CEL_LITERAL_ELEMENTS {
        return Err(format!(
            "has a list literal of {list_elements} elements; at most \
             {MAX_CEL_LITERAL_ELEMENTS} are allowed"
        ));
    }
    if map_entries > MAX_CEL_LITERAL_ELEMENTS {
        return Err(format!(
            "has a map literal of {map_entries} entries; at most {MAX_CEL_LITERAL_ELEMENTS} \
             are allowed"
        ));
    }
    Ok(())
}

/// Whose variables an expression sees, and so how large they can be.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Vocabulary {
    /// A preflight `boolExpr`: a node's record (`result`, `results`, `stdout`, …).
    #[default]
    Preflight,
    /// A `kubernetes` gate's `condition`: `objects` (at most [`MAX_GATE_OBJECTS`] listed
    /// objects) and `node`.
    KubernetesGate,
    /// A `prometheus` gate's `condition`: `result` (at most [`MAX_GATE_SAMPLES`] samples)
    /// and `node`.
    PrometheusGate,
}

/// The most objects a `kubernetes` gate hands its condition (a list with more fails the
/// gate, saying so: narrow the selector).
pub const MAX_GATE_OBJECTS: usize = 500;

/// The most samples a `prometheus` gate hands its condition.
pub const MAX_GATE_SAMPLES: usize = 500;

/// [`check_cost`] for an expression of `vocabulary`.
pub(super) fn check_cost_in(expr: &IdedExpr, vocabulary: Vocabulary) -> Result<(), String> {
    let cost = Estimator { bound: Vec::new(), vocabulary }.estimate(expr).cost;
    if cost > MAX_CEL_COST {
        let what = match vocabulary {
            Vocabulary::Preflight => "the largest record a node can report",
            Vocabulary::KubernetesGate | Vocabulary::PrometheusGate => {
                "the largest list a gate reads"
            }
        };
        return Err(format!(
            "may cost up to {cost} steps on {what}; at most \
             {MAX_CEL_COST} are allowed (a comprehension repeats its body for every element, \
             and `+` copies what it joins)"
        ));
    }
    Ok(())
}

/// The children of `expr`, each with whether it runs once per element of an enclosing
/// comprehension (its condition and step do; its list, initial value and result do not).
fn children(expr: &IdedExpr) -> Vec<(&IdedExpr, bool)> {
    let once: Vec<&IdedExpr> = match &expr.expr {
        Expr::Unspecified | Expr::Literal(_) | Expr::Ident(_) => Vec::new(),
        Expr::Call(call) => call.target.as_deref().into_iter().chain(&call.args).collect(),
        Expr::Comprehension(comprehension) => {
            let ComprehensionExpr { iter_range, accu_init, loop_cond, loop_step, result, .. } =
                comprehension.as_ref();
            return vec![
                (iter_range, false),
                (accu_init, false),
                (loop_cond, true),
                (loop_step, true),
                (result, false),
            ];
        }
        Expr::List(list) => list.elements.iter().collect(),
        Expr::Map(map) => entry_children(&map.entries),
        Expr::Select(select) => vec![&select.operand],
        Expr::Struct(structure) => entry_children(&structure.entries),
    };
    once.into_iter().map(|child| (child, false)).collect()
}

/// The keys and values of a map literal, the values of a struct literal.
fn entry_children(entries: &[IdedEntryExpr]) -> Vec<&IdedExpr> {
    entries
        .iter()
        .flat_map(|entry| match &entry.expr {
            EntryExpr::StructField(field) => vec![&field.value],
            EntryExpr::MapEntry(entry) => vec![&entry.key, &entry.value],
        })
        .collect()
}

/// What [`check_shape`] measures: the largest of each figure anywhere in the tree.
#[derive(Default)]
struct Shape {
    nodes: usize,
    nesting: usize,
    literal_bytes: usize,
    list_elements: usize,
    map_entries: usize,
}

impl Shape {
    /// Measure `expr`, which sits inside the bodies of `nesting` comprehensions.
    fn measure(&mut self, expr: &IdedExpr, nesting: usize) {
        self.nodes += 1;
        match &expr.expr {
            Expr::Literal(LiteralValue::String(text)) => {
                self.literal_bytes = self.literal_bytes.max(text.len());
            }
            Expr::Literal(LiteralValue::Bytes(bytes)) => {
                self.literal_bytes = self.literal_bytes.max(bytes.len());
            }
            Expr::List(list) => self.list_elements = self.list_elements.max(list.elements.len()),
            Expr::Map(map) => self.map_entries = self.map_entries.max(map.entries.len()),
            Expr::Struct(structure) => {
                self.map_entries = self.map_entries.max(structure.entries.len());
            }
            Expr::Comprehension(_) => self.nesting = self.nesting.max(nesting + 1),
            Expr::Unspecified
            | Expr::Literal(
                LiteralValue::Boolean(_)
                | LiteralValue::Double(_)
                | LiteralValue::Int(_)
                | LiteralValue::Null
                | LiteralValue::UInt(_),
            )
            | Expr::Call(_)
            | Expr::Ident(_)
            | Expr::Select(_) => {}
        }
        for (child, per_element) in children(expr) {
            self.measure(child, nesting + usize::from(per_element));
        }
    }
}

/// An upper bound on a value's size, one figure per level: a string of at most 1024 bytes
/// is `[1024]`, `results` is `[16, 1024]` (16 messages of 1024 bytes), a number or a bool
/// `[]`. A level past the end counts as 1.
#[derive(Clone, Debug, Default, PartialEq)]
struct Dims(Vec<u64>);

impl Dims {
    /// A string, bytes or list of at most `len` bytes or elements of size `element`.
    fn of(len: u64, element: &Dims) -> Dims {
        Dims(std::iter::once(len).chain(element.0.iter().copied()).collect())
    }

    /// How many bytes or elements the value has at its top level.
    fn len(&self) -> u64 {
        self.0.first().copied().unwrap_or(1)
    }

    /// The size of one element (of a list, or a key or value of a map).
    fn element(&self) -> Dims {
        Dims(self.0.iter().skip(1).copied().collect())
    }

    /// The value's whole size: every level multiplied.
    fn total(&self) -> u64 {
        self.0.iter().fold(1, |total, len| total.saturating_mul((*len).max(1)))
    }

    /// A bound on both `self` and `other`: the larger figure at each level.
    fn max(&self, other: &Dims) -> Dims {
        let levels = self.0.len().max(other.0.len());
        let at = |dims: &Dims, level: usize| dims.0.get(level).copied().unwrap_or(1);
        Dims((0..levels).map(|level| at(self, level).max(at(other, level))).collect())
    }

    /// A bound on `self + other`: strings, bytes and lists join (their lengths add),
    /// numbers stay numbers.
    fn join(&self, other: &Dims) -> Dims {
        if self.0.is_empty() && other.0.is_empty() {
            return Dims::default();
        }
        Dims::of(self.len().saturating_add(other.len()), &self.element().max(&other.element()))
    }
}

/// A bound on one expression: the size of its value and the steps to evaluate it.
#[derive(Clone, Debug, Default)]
struct Estimate {
    dims: Dims,
    cost: u64,
}

/// Functions and operators whose value is a number or a bool, whatever their arguments.
const SCALAR_FUNCTIONS: &[&str] = &[
    operators::LOGICAL_AND,
    operators::LOGICAL_OR,
    operators::LOGICAL_NOT,
    operators::SUBSTRACT,
    operators::MULTIPLY,
    operators::DIVIDE,
    operators::MODULO,
    operators::EQUALS,
    operators::NOT_EQUALS,
    operators::GREATER_EQUALS,
    operators::LESS_EQUALS,
    operators::GREATER,
    operators::LESS,
    operators::NEGATE,
    operators::NOT_STRICTLY_FALSE,
    operators::IN,
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "int",
    "uint",
    "double",
    "bool",
    "type",
    "hasValue",
];

/// Works out an [`Estimate`] bottom-up, knowing the size of each variable in scope.
#[derive(Default)]
struct Estimator {
    /// Comprehension variables, innermost last.
    bound: Vec<(String, Dims)>,
    /// Whose free variables the expression reads.
    vocabulary: Vocabulary,
}

impl Estimator {
    /// The estimate of `expr`.
    fn estimate(&mut self, expr: &IdedExpr) -> Estimate {
        let (dims, cost) = match &expr.expr {
            Expr::Unspecified => (Dims::default(), 0),
            Expr::Literal(literal) => (literal_dims(literal), 0),
            Expr::Ident(name) => (self.variable(name), 0),
            Expr::Call(call) => {
                let args: Vec<Estimate> = call
                    .target
                    .as_deref()
                    .into_iter()
                    .chain(&call.args)
                    .map(|arg| self.estimate(arg))
                    .collect();
                return call_estimate(&call.func_name, &args);
            }
            Expr::Comprehension(comprehension) => return self.comprehension(comprehension),
            Expr::List(list) => self.collection(expr, list.elements.len()),
            Expr::Map(map) => self.collection(expr, map.entries.len()),
            Expr::Struct(structure) => self.collection(expr, structure.entries.len()),
            Expr::Select(select) => {
                let operand = self.estimate(&select.operand);
                let dims = if select.test { Dims::default() } else { operand.dims.element() };
                (dims, operand.cost)
            }
        };
        Estimate { dims, cost: cost.saturating_add(NODE_STEPS) }
    }

    /// The size and cost of a list or map literal of `len` elements or entries: as many as
    /// it has, each the size of its largest key or value.
    fn collection(&mut self, expr: &IdedExpr, len: usize) -> (Dims, u64) {
        let parts: Vec<Estimate> =
            children(expr).into_iter().map(|(child, _)| self.estimate(child)).collect();
        let element = parts.iter().fold(Dims::default(), |dims, part| dims.max(&part.dims));
        let len = u64::try_from(len).unwrap_or(u64::MAX);
        (Dims::of(len, &element), sum(parts.iter().map(|part| part.cost)).saturating_add(len))
    }

    /// The size of a variable: a comprehension's, or one of ours at the most a node may
    /// report; a type name (`int`, `string`) is a scalar.
    fn variable(&self, name: &str) -> Dims {
        if let Some((_, dims)) = self.bound.iter().rev().find(|(bound, _)| bound == name) {
            return dims.clone();
        }
        // A listed object or a sample, modelled as a map of 16 fields of 512 bytes: a
        // condition reads a few fields of each, and a deeper select counts as a scalar.
        // This bounds the loops a condition may run (two nested over the list are
        // refused), not the bytes of the objects, which the lookup caps.
        let object = || Dims(vec![16, 512]);
        match (self.vocabulary, name) {
            (Vocabulary::KubernetesGate, "objects") => {
                return Dims::of(to_u64(MAX_GATE_OBJECTS), &object());
            }
            (Vocabulary::PrometheusGate, "result") => {
                return Dims::of(to_u64(MAX_GATE_SAMPLES), &object());
            }
            (Vocabulary::KubernetesGate | Vocabulary::PrometheusGate, "node") => {
                return Dims(vec![MAX_NODE_NAME_BYTES]);
            }
            (Vocabulary::KubernetesGate | Vocabulary::PrometheusGate, _) => {
                return Dims::default();
            }
            (Vocabulary::Preflight, _) => {}
        }
        match name {
            "result" => bytes(MAX_MESSAGE_BYTES),
            "results" => Dims::of(to_u64(MAX_MESSAGES), &bytes(MAX_MESSAGE_BYTES)),
            "stdout" | "stderr" => bytes(MAX_OUTPUT_BYTES),
            "node" => Dims(vec![MAX_NODE_NAME_BYTES]),
            // statusCode, error, and CEL's type names.
            _ => Dims::default(),
        }
    }

    /// A comprehension: its condition and step run once per element, and its accumulator
    /// (the list a `map` or `filter` builds) grows by what one step adds, each time. The
    /// `cel` crate appends to that list in place, so a step costs what it adds, not the
    /// whole accumulator.
    fn comprehension(&mut self, comprehension: &ComprehensionExpr) -> Estimate {
        let ComprehensionExpr {
            iter_range,
            iter_var,
            iter_var2,
            accu_var,
            accu_init,
            loop_cond,
            loop_step,
            result,
        } = comprehension;
        let range = self.estimate(iter_range);
        let init = self.estimate(accu_init);
        let elements = range.dims.len();
        let before = self.bound.len();
        let element = range.dims.element();
        self.bound.push((iter_var.clone(), element.clone()));
        if let Some(second) = iter_var2 {
            self.bound.push((second.clone(), element));
        }
        // One step on an empty accumulator, then the accumulator after every step.
        self.bound.push((accu_var.clone(), Dims(vec![0])));
        let step = self.estimate(loop_step);
        let accumulator = if step.dims.0.is_empty() {
            init.dims.max(&step.dims)
        } else {
            Dims::of(
                init.dims.len().saturating_add(elements.saturating_mul(step.dims.len())),
                &init.dims.element().max(&step.dims.element()),
            )
        };
        self.bound.pop();
        self.bound.push((accu_var.clone(), accumulator));
        let per_element = self.estimate(loop_cond).cost.saturating_add(step.cost);
        let result = self.estimate(result);
        self.bound.truncate(before);
        let cost = sum([range.cost, init.cost, elements.saturating_mul(per_element), result.cost]);
        Estimate { dims: result.dims, cost: cost.saturating_add(NODE_STEPS) }
    }
}

/// The size of a literal: a string's or bytes' length, or a scalar.
fn literal_dims(literal: &LiteralValue) -> Dims {
    match literal {
        LiteralValue::String(text) => bytes(text.len()),
        LiteralValue::Bytes(value) => bytes(value.len()),
        LiteralValue::Boolean(_)
        | LiteralValue::Double(_)
        | LiteralValue::Int(_)
        | LiteralValue::Null
        | LiteralValue::UInt(_) => Dims::default(),
    }
}

/// A string or bytes of at most `len` bytes.
fn bytes(len: usize) -> Dims {
    Dims(vec![to_u64(len)])
}

/// A length as a figure of the estimate.
fn to_u64(len: usize) -> u64 {
    u64::try_from(len).unwrap_or(u64::MAX)
}

/// The estimate of a call of `function` on `args` (the target first, for a method call).
fn call_estimate(function: &str, args: &[Estimate]) -> Estimate {
    let costs = sum(args.iter().map(|arg| arg.cost));
    let read = sum(args.iter().map(|arg| arg.dims.total()));
    let arg = |index: usize| args.get(index).map(|arg| arg.dims.clone()).unwrap_or_default();
    let (dims, cost) = match function {
        operators::ADD => {
            let dims = arg(0).join(&arg(1));
            let built = dims.total();
            (dims, costs.saturating_add(built))
        }
        operators::INDEX | operators::OPT_INDEX | operators::OPT_SELECT => {
            (arg(0).element(), costs.saturating_add(arg(1).total()))
        }
        operators::CONDITIONAL => {
            let branches = |index: usize| args.get(index).map_or(0, |arg| arg.cost);
            let cost = branches(0).saturating_add(branches(1).max(branches(2)));
            (arg(1).max(&arg(2)), cost)
        }
        "matches" => (Dims::default(), sum([costs, read, REGEX_COMPILE_COST])),
        scalar if SCALAR_FUNCTIONS.contains(&scalar) => {
            (Dims::default(), costs.saturating_add(read))
        }
        // Conversions and the rest build at most what they are given.
        _ => {
            let dims = args.iter().fold(Dims::default(), |dims, arg| dims.max(&arg.dims));
            (dims, costs.saturating_add(read))
        }
    };
    Estimate { dims, cost: cost.saturating_add(NODE_STEPS) }
}

/// A saturating sum.
fn sum(figures: impl IntoIterator<Item = u64>) -> u64 {
    figures.into_iter().fold(0, u64::saturating_add)
}

/// A CEL context with every variable of [`super::CEL_VARIABLES`] bound to `record`.
pub(super) fn context_for(
    node: &str,
    record: &autopilot_api::preflight::RawRecord,
) -> cel::Context<'static, 'static> {
    /// CEL's standard library, built once: every evaluation shares it (it is immutable).
    static STDLIB: std::sync::LazyLock<std::sync::Arc<cel::Env>> =
        std::sync::LazyLock::new(|| std::sync::Arc::new(cel::Env::stdlib()));
    let mut context = cel::Context::with_env(std::sync::Arc::clone(&STDLIB));
    context.add_variable_from_value("result", record.result().to_owned());
    context.add_variable_from_value("results", record.messages.clone());
    context.add_variable_from_value("statusCode", record.status_code);
    context.add_variable_from_value("error", record.is_error());
    context.add_variable_from_value("stdout", record.stdout.clone());
    context.add_variable_from_value("stderr", record.stderr.clone());
    context.add_variable_from_value("node", node.to_owned());
    context
}

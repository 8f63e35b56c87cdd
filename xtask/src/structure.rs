//! The workspace's module structure, checked: no module imports, directly or through
//! others, a module that imports it back (an import cycle), in any crate.
//!
//! Read from the sources as text: a file is one module (`a/b.rs` or `a/b/mod.rs` is `a::b`),
//! and it imports another when it names a path into it (`use crate::a::b::X`, `super::c::f`,
//! `self::d`), in a `use` (braces expanded) or in code. A path goes into the deepest module
//! it names that has a file, and an item that module only re-exports leads on to the module
//! that defines it; a re-export (`pub use child::X`) is no import of its own. Test code is left out
//! (`tests.rs` and `tests/` files, `#[cfg(test)] mod tests { … }` blocks): tests read the
//! module they test.
//!
//! It also holds the Plan engine to its three levels ([`PLAN_LEVELS`]): no import from a
//! lower level of `plan/` to a higher one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every crate's source root: `crates/*/src`, `integration/src`, `xtask/src`.
fn source_roots(workspace: &Path) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = std::fs::read_dir(workspace.join("crates"))
        .map(|entries| entries.flatten().map(|entry| entry.path().join("src")).collect())
        .unwrap_or_default();
    roots.push(workspace.join("integration/src"));
    roots.push(workspace.join("xtask/src"));
    roots.retain(|root| root.is_dir());
    roots.sort();
    roots
}

/// The `.rs` files under `dir` that are not test code.
fn module_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return files };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "tests" {
                files.extend(module_files(&path));
            }
        } else if name.ends_with(".rs") && name != "tests.rs" {
            files.push(path);
        }
    }
    files
}

/// The module path of `file` under `root` (`a/b.rs`, `a/b/mod.rs` → `["a", "b"]`; the crate
/// root `lib.rs` or `main.rs` → `[]`).
fn module_of(root: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(root).unwrap_or(file).with_extension("");
    let mut parts: Vec<String> =
        relative.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    parts
}

/// `text` without its `#[cfg(test)] mod … { … }` blocks and its comments.
fn without_tests(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let block = after.find('{').filter(|open| !after[..*open].contains(';'));
        let Some(open) = block else {
            // `#[cfg(test)] mod tests;` or an item without a body: skip the attribute.
            rest = &after["#[cfg(test)]".len()..];
            continue;
        };
        let mut depth = 0usize;
        let mut end = after.len();
        for (i, c) in after[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out.lines()
        .map(|line| line.split_once("//").map_or(line, |(code, _)| code))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path that starts at `crate`, `super` or `self` in `code`, as its segments (the
/// braces of a `use` expanded).
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        let head = ["crate::", "super::", "self::"]
            .into_iter()
            .find(|h| bytes[i..].starts_with(h.as_bytes()));
        match head {
            Some(head) if starts_word => {
                let (segments, used) = path_at(&code[i..]);
                for path in segments {
                    found.push(path);
                }
                i += used.max(head.len());
            }
            _ => i += 1,
        }
    }
    found
}

/// Every path of a `use` whose first segment is not `crate`, `super` or `self` (in a module
/// with children, `use child::X` names the child `child`), braces expanded.
fn relative_use_paths(code: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while let Some(at) = code[i..].find("use ") {
        let start = i + at;
        i = start + 4;
        let starts_word =
            start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        if !starts_word {
            continue;
        }
        let rest = code[i..].trim_start();
        if ["crate::", "super::", "self::", "::"].iter().any(|head| rest.starts_with(head)) {
            continue;
        }
        let offset = code[i..].len() - rest.len();
        let (tree, used) = path_at(rest);
        found.extend(tree);
        i += offset + used;
    }
    found
}

/// The paths of the path tree at the start of `text` (`a::b::{c, d::e}`), and how many bytes
/// it took.
fn path_at(text: &str) -> (Vec<Vec<String>>, usize) {
    let mut prefix = Vec::new();
    let mut at = 0;
    loop {
        let word: String =
            text[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        if word.is_empty() {
            break;
        }
        at += word.len();
        prefix.push(word);
        let rest = &text[at..];
        let spaces = rest.len() - rest.trim_start().len();
        if !rest.trim_start().starts_with("::") {
            return (vec![prefix], at);
        }
        at += spaces + 2;
        at += text[at..].len() - text[at..].trim_start().len();
        if text[at..].starts_with('{') {
            let mut paths = Vec::new();
            at += 1;
            loop {
                at += text[at..].len() - text[at..].trim_start().len();
                if text[at..].starts_with('}') || at >= text.len() {
                    at += 1;
                    break;
                }
                let (inner, used) = path_at(&text[at..]);
                for tail in inner {
                    paths.push(prefix.iter().cloned().chain(tail).collect());
                }
                at += used.max(1);
                at += text[at..].len() - text[at..].trim_start().len();
                if text[at..].starts_with(',') {
                    at += 1;
                }
            }
            if paths.is_empty() {
                paths.push(prefix);
            }
            return (paths, at);
        }
    }
    (vec![prefix], at)
}

/// The module a path from module `from` leads into (the deepest one with a file), and the
/// item it names there, if any.
fn target(
    from: &[String],
    path: &[String],
    modules: &BTreeSet<Vec<String>>,
) -> (Vec<String>, Option<String>) {
    let mut module: Vec<String> = from.to_vec();
    for segment in path {
        match segment.as_str() {
            "crate" => module.clear(),
            "super" => {
                module.pop();
            }
            "self" => {}
            name => {
                let mut deeper = module.clone();
                deeper.push(name.to_owned());
                if !modules.contains(&deeper) {
                    return (module, Some(name.to_owned()));
                }
                module = deeper;
            }
        }
    }
    (module, None)
}

/// The names of the items `code` defines (functions, types, constants, traits, macros).
fn definitions(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let words: Vec<&str> = code
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '!'))
        .filter(|word| !word.is_empty())
        .collect();
    for pair in words.windows(2) {
        if matches!(
            pair[0],
            "fn" | "struct" | "enum" | "const" | "static" | "type" | "trait" | "macro_rules!"
        ) {
            names.insert(pair[1].trim_end_matches('!').to_owned());
        }
    }
    names
}

/// What a module re-exports from other modules of its crate: by name (`pub use a::X`), and
/// the modules it re-exports whole (`pub use a::*`).
#[derive(Default)]
struct Reexports {
    names: BTreeMap<String, Vec<String>>,
    globs: Vec<Vec<String>>,
}

/// `code` without its re-export statements (`pub use …;`, `pub(crate) use …;`,
/// `pub(super) use …;`).
fn without_reexports(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    loop {
        let next = ["pub use ", "pub(crate) use ", "pub(super) use "]
            .iter()
            .filter_map(|head| rest.find(head))
            .min();
        let Some(at) = next else { break };
        out.push_str(&rest[..at]);
        rest = rest[at..].split_once(';').map_or("", |(_, after)| after);
    }
    out.push_str(rest);
    out
}

/// What `module` re-exports (`pub use`, `pub(crate) use`, `pub(super) use`).
fn reexports_of(module: &[String], code: &str, modules: &BTreeSet<Vec<String>>) -> Reexports {
    let mut exported = Reexports::default();
    for statement in code.split(';') {
        let Some(path) = ["pub use ", "pub(crate) use ", "pub(super) use "]
            .iter()
            .find_map(|head| statement.rsplit_once(head).map(|(_, path)| path))
        else {
            continue;
        };
        let (tree, _) = path_at(path.trim_start());
        for mut path in tree {
            if path.first().is_some_and(|head| !["crate", "super", "self"].contains(&head.as_str()))
            {
                path.insert(0, "self".to_owned());
            }
            let (into, item) = target(module, &path, modules);
            match item.as_deref() {
                Some("*") => exported.globs.push(into),
                Some(name) => {
                    exported.names.insert(name.to_owned(), into);
                }
                None => {}
            }
        }
    }
    exported
}

/// The module whose file defines `item` of `module`: `module` itself, or through its
/// re-exports the one it comes from.
fn defining(module: &[String], item: Option<&str>, read: &Crate, depth: usize) -> Vec<String> {
    let Some(item) = item.filter(|_| depth < 8) else { return module.to_vec() };
    if read.definitions.get(module).is_some_and(|names| names.contains(item)) {
        return module.to_vec();
    }
    let Some(exported) = read.reexports.get(module) else { return module.to_vec() };
    if let Some(from) = exported.names.get(item) {
        return defining(from, Some(item), read, depth + 1);
    }
    for from in &exported.globs {
        let has = read.definitions.get(from).is_some_and(|names| names.contains(item))
            || read.reexports.get(from).is_some_and(|r| r.names.contains_key(item));
        if has {
            return defining(from, Some(item), read, depth + 1);
        }
    }
    module.to_vec()
}

/// One crate as read: its module files, the paths each names, its items and re-exports.
struct Crate {
    files: BTreeMap<Vec<String>, PathBuf>,
    paths: BTreeMap<Vec<String>, Vec<Vec<String>>>,
    definitions: BTreeMap<Vec<String>, BTreeSet<String>>,
    reexports: BTreeMap<Vec<String>, Reexports>,
}

impl Crate {
    /// The crate whose source root is `root`.
    fn read(root: &Path) -> Self {
        let files: BTreeMap<Vec<String>, PathBuf> =
            module_files(root).into_iter().map(|file| (module_of(root, &file), file)).collect();
        let modules: BTreeSet<Vec<String>> = files.keys().cloned().collect();
        let mut read = Crate {
            files: BTreeMap::new(),
            paths: BTreeMap::new(),
            definitions: BTreeMap::new(),
            reexports: BTreeMap::new(),
        };
        for (module, file) in &files {
            let whole = without_tests(&std::fs::read_to_string(file).unwrap_or_default());
            // A re-export is the module's face, not a use of what it re-exports: it leads
            // importers to the defining module (`defining`) and is no edge of its own.
            read.reexports.insert(module.clone(), reexports_of(module, &whole, &modules));
            let code = without_reexports(&whole);
            let relative = relative_use_paths(&code).into_iter().filter_map(|path| {
                let child: Vec<String> = module.iter().chain(path.first()).cloned().collect();
                modules.contains(&child).then(|| {
                    std::iter::once("self".to_owned()).chain(path).collect::<Vec<String>>()
                })
            });
            let all: Vec<Vec<String>> = paths(&code).into_iter().chain(relative).collect();
            read.definitions.insert(module.clone(), definitions(&code));
            read.paths.insert(module.clone(), all);
        }
        read.files = files;
        read
    }

    /// Each module and the modules it imports (where the items it names are defined).
    fn edges(&self) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
        let modules: BTreeSet<Vec<String>> = self.files.keys().cloned().collect();
        let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
        for (module, paths) in &self.paths {
            for path in paths {
                let (into, item) = target(module, path, &modules);
                let to = defining(&into, item.as_deref(), self, 0);
                if &to != module && self.files.contains_key(&to) {
                    edges.entry(module.clone()).or_default().insert(to);
                }
            }
        }
        edges
    }
}

/// The import cycles of the workspace at `workspace`: each as its files, sorted.
fn cycles(workspace: &Path) -> Vec<Vec<String>> {
    let mut all = Vec::new();
    for root in source_roots(workspace) {
        let read = Crate::read(&root);
        let modules: BTreeSet<Vec<String>> = read.files.keys().cloned().collect();
        for component in strongly_connected(&modules, &read.edges()) {
            let mut names: Vec<String> = component
                .iter()
                .filter_map(|module| read.files.get(module))
                .map(|file| {
                    file.strip_prefix(workspace).unwrap_or(file).to_string_lossy().into_owned()
                })
                .collect();
            names.sort();
            all.push(names);
        }
    }
    all.sort();
    all
}

/// The strongly connected components of more than one module (Tarjan's algorithm).
fn strongly_connected(
    modules: &BTreeSet<Vec<String>>,
    edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
) -> Vec<Vec<Vec<String>>> {
    struct State<'a> {
        edges: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'a Vec<String>, usize>,
        low: BTreeMap<&'a Vec<String>, usize>,
        stack: Vec<&'a Vec<String>>,
        on_stack: BTreeSet<&'a Vec<String>>,
        found: Vec<Vec<Vec<String>>>,
    }
    fn visit<'a>(state: &mut State<'a>, node: &'a Vec<String>) {
        let next = state.index.len();
        state.index.insert(node, next);
        state.low.insert(node, next);
        state.stack.push(node);
        state.on_stack.insert(node);
        if let Some(targets) = state.edges.get(node) {
            for to in targets {
                if !state.index.contains_key(to) {
                    visit(state, to);
                    let low = state.low[to].min(state.low[node]);
                    state.low.insert(node, low);
                } else if state.on_stack.contains(to) {
                    let low = state.index[to].min(state.low[node]);
                    state.low.insert(node, low);
                }
            }
        }
        if state.low[node] == state.index[node] {
            let mut component = Vec::new();
            while let Some(top) = state.stack.pop() {
                state.on_stack.remove(top);
                component.push(top.clone());
                if top == node {
                    break;
                }
            }
            if component.len() > 1 {
                state.found.push(component);
            }
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for module in modules {
        if !state.index.contains_key(module) {
            visit(&mut state, module);
        }
    }
    state.found
}

/// The levels of the Plan engine (`crates/autopilot-engine/src/plan`), lowest first: the
/// model (the words every rule shares), the rules (pure verdicts), the driver (the one
/// writer of a command's status). A module imports from its own level or a lower one.
const PLAN_LEVELS: [&str; 3] = ["model", "rules", "driver"];

/// The level of a module of the engine crate in [`PLAN_LEVELS`] (`None`: outside them).
fn plan_level(module: &[String]) -> Option<usize> {
    match module {
        [plan, level, ..] if plan == "plan" => PLAN_LEVELS.iter().position(|l| l == level),
        _ => None,
    }
}

/// Every import in the Plan engine from a lower level to a higher one, as
/// `from -> to` (module paths).
fn upward_plan_imports(workspace: &Path) -> Vec<String> {
    let read = Crate::read(&workspace.join("crates/autopilot-engine/src"));
    let mut upward = Vec::new();
    for (from, tos) in read.edges() {
        let Some(low) = plan_level(&from) else { continue };
        for to in tos {
            if plan_level(&to).is_some_and(|high| high > low) {
                upward.push(format!("{} -> {}", from.join("::"), to.join("::")));
            }
        }
    }
    upward
}

#[test]
fn the_plan_engine_imports_only_from_its_own_level_or_below() {
    let workspace = crate::workspace_root();
    let read = Crate::read(&workspace.join("crates/autopilot-engine/src"));
    for level in PLAN_LEVELS {
        let at: Vec<String> = vec!["plan".to_owned(), level.to_owned()];
        assert!(read.files.contains_key(&at), "plan::{level} is gone: update PLAN_LEVELS");
    }
    let upward = upward_plan_imports(&workspace);
    assert!(upward.is_empty(), "imports from a lower level of plan/ to a higher one: {upward:#?}");
}

#[test]
fn no_module_imports_itself_back() {
    let found = cycles(&crate::workspace_root());
    assert!(found.is_empty(), "import cycles (cut them): {found:#?}");
}

#[test]
fn paths_are_read_with_their_braces_and_lead_into_the_deepest_module_with_a_file() {
    let code = "use super::{a::{B, c}, d};\nfn f() { crate::x::y::z(); self::w::V }";
    let found = paths(code);
    let as_text: Vec<String> = found.iter().map(|p| p.join("::")).collect();
    assert_eq!(as_text, ["super::a::B", "super::a::c", "super::d", "crate::x::y::z", "self::w::V"]);
    let modules: BTreeSet<Vec<String>> =
        [vec![], vec!["x".to_owned()], vec!["x".to_owned(), "y".to_owned()]].into_iter().collect();
    let from = vec!["x".to_owned()];
    let (into, item) = target(&from, &found[3], &modules);
    assert_eq!((into, item.as_deref()), (vec!["x".to_owned(), "y".to_owned()], Some("z")));
    let (into, item) = target(&from, &found[0], &modules);
    assert_eq!((into, item.as_deref()), (Vec::new(), Some("a")), "a is an item of the root");
    let facade = "pub use child::X;\npub(crate) use self::other::Y;\nuse self::used::Z;";
    assert_eq!(without_reexports(facade).trim(), "use self::used::Z;", "a re-export is no import");
    let tested = "fn a() {}\n#[cfg(test)]\nmod tests { use super::*; fn b() { crate::q::r(); } }\n";
    assert!(paths(&without_tests(tested)).is_empty());
}

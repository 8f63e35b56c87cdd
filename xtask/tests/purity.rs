//! The one purity guard of the workspace: the decision cores stay free of I/O, clocks and
//! randomness (DESIGN §1, STYLE §11 habits 1 and 6). They are handed `now`, the observed
//! cluster and a chooser; they never reach for a client, a runtime, the file system, the
//! network, a clock or a random source themselves.
//!
//! The pure files are listed one by one ([`PURE_FILES`]), by path from the workspace root. A
//! listed file that is missing fails the guard, so a move or a rename cannot drop a file out
//! of it silently, and so does a new file in a pure directory ([`PURE_DIRS`]) that is listed
//! neither as pure nor as test-only. Comments and `#[cfg(test)]` items are not checked (tests
//! may use tokio and clocks; prose may name what the code must not use); string literals are.

use std::fmt;
use std::path::{Path, PathBuf};

/// Every pure source file, relative to the workspace root.
const PURE_FILES: &[&str] = &[
    // The plan machine: `step` and everything it decides with.
    "crates/autopilot-controller/src/plan/mod.rs",
    "crates/autopilot-controller/src/plan/inputs.rs",
    "crates/autopilot-controller/src/plan/decision.rs",
    "crates/autopilot-controller/src/plan/machine.rs",
    "crates/autopilot-controller/src/plan/phases.rs",
    "crates/autopilot-controller/src/plan/command.rs",
    "crates/autopilot-controller/src/plan/discovery.rs",
    "crates/autopilot-controller/src/plan/checks.rs",
    "crates/autopilot-controller/src/plan/payload.rs",
    "crates/autopilot-controller/src/plan/removed_apis.rs",
    "crates/autopilot-controller/src/plan/rollout.rs",
    "crates/autopilot-controller/src/plan/progress.rs",
    "crates/autopilot-controller/src/plan/schedule.rs",
    "crates/autopilot-controller/src/plan/targets.rs",
    "crates/autopilot-controller/src/plan/selector.rs",
    // Preflight: compiling the checks, their templates, scheduling and evaluating them.
    "crates/autopilot-controller/src/preflight/mod.rs",
    "crates/autopilot-controller/src/preflight/compile.rs",
    "crates/autopilot-controller/src/preflight/evaluate.rs",
    "crates/autopilot-controller/src/preflight/scheduler.rs",
    "crates/autopilot-controller/src/preflight/template.rs",
    // The cordon/drain decision (its shell is `crates/autopilot-controller/src/drain.rs`).
    "crates/autopilot-controller/src/cordon.rs",
    // k0s versions and their order (the updater's decisions and the removed-API check).
    "crates/autopilot-api/src/version.rs",
    // The node's signal phase machine.
    "crates/autopilot-signal/src/phase.rs",
    // The updater's decisions: when to check, which release, which plan.
    "crates/autopilot-updater/src/decide.rs",
    "crates/autopilot-updater/src/channel.rs",
    "crates/autopilot-updater/src/cron.rs",
    "crates/autopilot-updater/src/window.rs",
];

/// Directories whose every `.rs` file (not recursing) must be listed: in [`PURE_FILES`], or
/// here as test-only.
const PURE_DIRS: &[(&str, &[&str])] = &[
    ("crates/autopilot-controller/src/plan", &["crates/autopilot-controller/src/plan/tests.rs"]),
    (
        "crates/autopilot-controller/src/preflight",
        &["crates/autopilot-controller/src/preflight/tests.rs"],
    ),
];

/// What a pure file must not name, and what it stands for. A word matches where it starts a
/// name or a path segment (`tokio::`, `rand_core`, `jiff::Timestamp::now`), not inside one
/// (`operand`, `random`).
const FORBIDDEN: &[(&str, &str)] = &[
    ("kube::", "the kube client and runtime (kube::Api, kube::Client, kube::runtime)"),
    ("tokio", "the async runtime"),
    ("hyper", "an HTTP client"),
    ("reqwest", "an HTTP client"),
    ("std::fs", "the file system"),
    ("std::net", "the network"),
    ("SystemTime", "the system clock"),
    ("Instant::", "the monotonic clock"),
    ("Utc::now", "the clock"),
    ("Timestamp::now", "the clock"),
    ("Zoned::now", "the clock"),
    ("rand", "randomness"),
];

#[test]
fn pure_modules_use_no_client_runtime_io_clock_or_randomness() {
    let root = workspace_root();
    let mut problems = Vec::new();
    for file in PURE_FILES {
        match std::fs::read_to_string(root.join(file)) {
            Ok(source) => problems
                .extend(forbidden_uses(&source).into_iter().map(|found| format!("{file}:{found}"))),
            Err(err) => problems.push(format!("{file}: listed as pure but cannot be read: {err}")),
        }
    }
    assert!(problems.is_empty(), "pure modules break the purity rule:\n{}", problems.join("\n"));
}

#[test]
fn every_file_of_a_pure_directory_is_listed() {
    let root = workspace_root();
    let mut unlisted = Vec::new();
    for (dir, test_only) in PURE_DIRS {
        let entries = std::fs::read_dir(root.join(dir))
            .unwrap_or_else(|err| panic!("{dir}: listed as pure but cannot be read: {err}"));
        for entry in entries {
            let path = entry.unwrap_or_else(|err| panic!("listing {dir}: {err}")).path();
            if path.extension().is_none_or(|ext| ext != "rs") {
                continue;
            }
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            let file = format!("{dir}/{}", name.unwrap_or_default());
            if !PURE_FILES.contains(&file.as_str()) && !test_only.contains(&file.as_str()) {
                unlisted.push(file);
            }
        }
    }
    assert!(
        unlisted.is_empty(),
        "files in a pure directory listed neither as pure nor as test-only \
         (add them to PURE_FILES or to PURE_DIRS in {}):\n{}",
        file!(),
        unlisted.join("\n")
    );
}

#[test]
fn the_guard_sees_code_but_not_comments_or_test_items() {
    let source = r#"
//! Never calls `tokio::spawn` (a comment).
use std::fs::read; /* a block /* nested */ comment: Timestamp::now */
const URL: &str = "https://h/k0s"; use kube::Api; // a URL does not start a comment
fn operand(random: u8) -> char { let _ = '\''; '"' }
fn at<'a>(s: &'a str) -> &'a str { s }
#[cfg(test)]
mod tests {
    use rand::Rng;
    fn t() { let _ = "}"; tokio::spawn(async {}); }
}
#[cfg(test)]
use tokio::time;
fn now() -> jiff::Timestamp { jiff::Timestamp::now() }
"#;
    let found: Vec<String> = forbidden_uses(source).iter().map(ToString::to_string).collect();
    assert_eq!(
        found,
        [
            "3: `std::fs` (the file system)",
            "4: `kube::` (the kube client and runtime (kube::Api, kube::Client, kube::runtime))",
            "14: `Timestamp::now` (the clock)",
        ]
    );
}

/// A forbidden word found on a line.
#[derive(Debug)]
struct Found {
    line: usize,
    word: &'static str,
    why: &'static str,
}

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: `{}` ({})", self.line, self.word, self.why)
    }
}

/// Every forbidden word in `source` outside comments and `#[cfg(test)]` items.
fn forbidden_uses(source: &str) -> Vec<Found> {
    let code = without_tests(&without_comments(source));
    let mut found = Vec::new();
    for (index, line) in code.lines().enumerate() {
        for &(word, why) in FORBIDDEN {
            if contains_word(line, word) {
                found.push(Found { line: index + 1, word, why });
            }
        }
    }
    found
}

/// Whether `word` occurs in `line` at the start of a name: not preceded by a character of a
/// name and, if it ends in one, not followed by a letter or digit (`rand_core` matches
/// `rand`, `random` does not).
fn contains_word(line: &str, word: &str) -> bool {
    line.match_indices(word).any(|(at, _)| {
        let before = line[..at].chars().next_back();
        let after = line[at + word.len()..].chars().next();
        let inside_a_name = before.is_some_and(|c| c.is_alphanumeric() || c == '_');
        let name_goes_on =
            word.ends_with(char::is_alphanumeric) && after.is_some_and(char::is_alphanumeric);
        !inside_a_name && !name_goes_on
    })
}

/// What a byte of source is part of.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Code,
    Comment,
    /// A string or character literal (searched, but never a comment start or a bracket).
    Literal,
}

/// The class of every byte of `source`.
fn classify(source: &str) -> Vec<Class> {
    let bytes = source.as_bytes();
    let mut classes = vec![Class::Code; bytes.len()];
    let mut i = 0;
    while i < bytes.len() {
        let (class, end) = match bytes[i] {
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                (Class::Comment, source[i..].find('\n').map_or(bytes.len(), |n| i + n))
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                (Class::Comment, block_comment_end(bytes, i))
            }
            b'"' => (Class::Literal, string_end(bytes, i)),
            b'r' if starts_raw_string(bytes, i) => (Class::Literal, raw_string_end(bytes, i)),
            b'\'' => match char_literal_end(source, i) {
                Some(end) => (Class::Literal, end),
                None => (Class::Code, i + 1), // a lifetime
            },
            _ => (Class::Code, i + 1),
        };
        let end = end.min(bytes.len());
        classes[i..end].fill(class);
        i = end;
    }
    classes
}

/// The end (exclusive) of the block comment starting at `start` (they nest).
fn block_comment_end(bytes: &[u8], start: usize) -> usize {
    let (mut depth, mut i) = (0, start);
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1)) {
            (b'/', Some(b'*')) => (depth, i) = (depth + 1, i + 2),
            (b'*', Some(b'/')) => {
                (depth, i) = (depth - 1, i + 2);
                if depth == 0 {
                    return i;
                }
            }
            _ => i += 1,
        }
    }
    bytes.len()
}

/// The end (exclusive) of the string literal whose opening quote is at `start`.
fn string_end(bytes: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}

/// Whether a raw string (`r"…"`, `r#"…"#`, `br"…"`) starts with the `r` at `i`.
fn starts_raw_string(bytes: &[u8], i: usize) -> bool {
    let prefix_start = if i > 0 && bytes[i - 1] == b'b' { i - 1 } else { i };
    let starts_name = prefix_start == 0 || {
        let before = bytes[prefix_start - 1];
        !(before.is_ascii_alphanumeric() || before == b'_')
    };
    let hashes = bytes[i + 1..].iter().take_while(|&&b| b == b'#').count();
    starts_name && bytes.get(i + 1 + hashes) == Some(&b'"')
}

/// The end (exclusive) of the raw string whose `r` is at `start`.
fn raw_string_end(bytes: &[u8], start: usize) -> usize {
    let hashes = bytes[start + 1..].iter().take_while(|&&b| b == b'#').count();
    let body = start + 1 + hashes + 1;
    let mut i = body;
    while i < bytes.len() {
        let closes = bytes[i] == b'"'
            && bytes.len() >= i + 1 + hashes
            && bytes[i + 1..i + 1 + hashes].iter().all(|&b| b == b'#');
        if closes {
            return i + 1 + hashes;
        }
        i += 1;
    }
    bytes.len()
}

/// The end (exclusive) of the character literal whose opening quote is at `start`, or `None`
/// when the quote starts a lifetime or a label.
fn char_literal_end(source: &str, start: usize) -> Option<usize> {
    let rest = &source[start + 1..];
    if rest.starts_with('\\') {
        return rest.get(2..)?.find('\'').map(|n| start + 1 + 2 + n + 1);
    }
    let c = rest.chars().next()?;
    rest[c.len_utf8()..].starts_with('\'').then(|| start + 1 + c.len_utf8() + 1)
}

/// `source` with every comment blanked out (line breaks kept, so line numbers stay).
fn without_comments(source: &str) -> String {
    let classes = classify(source);
    blank(source, |i| classes[i] == Class::Comment)
}

/// `code` (without comments) with every `#[cfg(test)]` item blanked out: the attribute, the
/// attributes after it and the item up to its `;` or its closing brace.
fn without_tests(code: &str) -> String {
    const CFG_TEST: &str = "#[cfg(test)]";
    let classes = classify(code);
    let bytes = code.as_bytes();
    let mut hidden = vec![false; bytes.len()];
    for (at, _) in code.match_indices(CFG_TEST) {
        if classes[at] != Class::Code {
            continue;
        }
        let end = item_end(bytes, &classes, at + CFG_TEST.len());
        hidden[at..end].fill(true);
    }
    blank(code, |i| hidden[i])
}

/// The end (exclusive) of the item starting at `start`: after the first `;` outside any
/// bracket, or after the brace closing the first `{` outside any bracket.
fn item_end(bytes: &[u8], classes: &[Class], start: usize) -> usize {
    let mut depth = 0usize;
    for i in start..bytes.len() {
        if classes[i] != Class::Code {
            continue;
        }
        match bytes[i] {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' => depth = depth.saturating_sub(1),
            b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
            b';' if depth == 0 => return i + 1,
            _ => {}
        }
    }
    bytes.len()
}

/// `source` with every byte for which `hide` holds turned into a space, line breaks kept.
fn blank(source: &str, hide: impl Fn(usize) -> bool) -> String {
    let bytes: Vec<u8> = source
        .bytes()
        .enumerate()
        .map(|(i, b)| if hide(i) && b != b'\n' { b' ' } else { b })
        .collect();
    // Only whole characters are blanked (comments and items start and end on ASCII).
    String::from_utf8(bytes).unwrap_or_else(|err| panic!("blanking broke UTF-8: {err}"))
}

/// The workspace root (this file is in `xtask/tests/`).
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or_else(|| panic!("xtask sits inside the workspace"))
        .to_path_buf()
}

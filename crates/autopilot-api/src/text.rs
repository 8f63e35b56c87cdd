//! Small text helpers shared by the controller, the node agent and the updater.

/// The longest prefix of `text` of at most `max` bytes that ends at a char boundary.
pub fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `text` safe to print on a terminal: every control character (C0, DEL, C1: escape
/// sequences, carriage returns, tabs, newlines) and every Unicode format character that
/// reorders or hides text (bidirectional overrides and isolates, zero-width marks) is shown
/// escaped (`\u{1b}`, `\n`, `\u{202e}`) instead of acting on the terminal. For text a node or
/// anyone but the operator wrote.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_unsafe(c) {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Whether `c` would act on a terminal rather than show: a control character, or a format
/// character that reorders or hides text.
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{200b}'..='\u{200f}' // zero-width space/joiners, LRM, RLM
            | '\u{202a}'..='\u{202e}' // bidirectional embeddings and overrides
            | '\u{2066}'..='\u{2069}' // bidirectional isolates
            | '\u{feff}' // zero-width no-break space
        )
}

/// At most `max` bytes of `text`, cut at a char boundary, with `…` marking a cut (so a cut
/// result is up to `max` + 3 bytes).
pub fn truncate(text: &str, max: usize) -> String {
    let kept = cut(text, max);
    if kept.len() == text.len() { kept.to_string() } else { format!("{kept}…") }
}

/// An error and its causes on one line, `error: cause: cause`, for logs, Events and status
/// reasons. A cause whose text the line already holds (an error that prints its source
/// itself) is not repeated.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_escapes_what_would_act_on_a_terminal_and_keeps_the_rest() {
        assert!(matches!(printable("free on w1 – ok ✓"), std::borrow::Cow::Borrowed(_)));
        assert_eq!(printable("a\u{1b}[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(
            printable("line1\nline2\r\tx\u{7f}\u{9b}"),
            "line1\\nline2\\r\\tx\\u{7f}\\u{9b}"
        );
        assert_eq!(
            printable("abc\u{202e}fed\u{2066}\u{200b}"),
            "abc\\u{202e}fed\\u{2066}\\u{200b}"
        );
    }

    #[test]
    fn truncation_keeps_whole_characters_and_marks_the_cut() {
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(truncate("ééé", 3), "é…");
        assert_eq!(truncate(&"x".repeat(2000), 1024).len(), 1024 + '…'.len_utf8());
    }

    #[test]
    fn cut_keeps_char_boundaries() {
        assert_eq!(cut("abc", 10), "abc");
        assert_eq!(cut("aéb", 2), "a");
    }

    /// An error with a message and an optional cause, as errors built with `thiserror` are.
    #[derive(Debug)]
    struct Layer {
        message: String,
        cause: Option<Box<Layer>>,
    }

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.message)
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.cause.as_deref().map(|cause| cause as &(dyn std::error::Error + 'static))
        }
    }

    fn layer(message: &str, cause: Option<Layer>) -> Layer {
        Layer { message: message.to_owned(), cause: cause.map(Box::new) }
    }

    #[test]
    fn error_chain_joins_causes_without_repeating_them() {
        let inner = layer("connection refused", None);
        let err =
            layer("reading the answer of http://127.0.0.1:9/stable/index.yaml failed", Some(inner));
        let line = error_chain(&err);
        assert!(line.contains("127.0.0.1:9"), "{line}");
        assert!(line.ends_with("connection refused"), "{line}");
        assert_eq!(line.matches("connection refused").count(), 1, "{line}");

        let repeats =
            layer("HyperError: connection refused", Some(layer("connection refused", None)));
        assert_eq!(error_chain(&repeats), "HyperError: connection refused");
    }
}

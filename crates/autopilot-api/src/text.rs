//! Small text helpers shared by the controller and the node agent.

/// At most `max` bytes of `text`, cut at a char boundary, with `…` marking a cut (so a cut
/// result is up to `max` + 3 bytes).
pub fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_whole_characters_and_marks_the_cut() {
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(truncate("ééé", 3), "é…");
        assert_eq!(truncate(&"x".repeat(2000), 1024).len(), 1024 + '…'.len_utf8());
    }
}

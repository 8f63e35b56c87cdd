//! Kubernetes label and field selectors, parsed strictly and matched against
//! [`crate::plan::TargetObject`]s.
//!
//! Unlike k0s (REF §4.2), a selector that does not parse is an error the plan reports, never
//! "select everything". Label selectors follow `kubectl get -l` (`k=v`, `k==v`, `k!=v`,
//! `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, `k>1`, `k<1`, comma-separated), with the
//! Kubernetes syntax checks on keys and values. Field selectors support only
//! `metadata.name` with `=`, `==` and `!=`, the one field both kinds of signal object index.

use std::collections::BTreeSet;
use std::fmt;

/// Why a selector does not parse; the text names the problem (not the selector).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectorError {
    problem: String,
}

impl SelectorError {
    fn new(problem: impl Into<String>) -> Self {
        Self { problem: problem.into() }
    }
}

impl fmt::Display for SelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.problem)
    }
}

impl std::error::Error for SelectorError {}

// === Label selectors ===

/// A parsed label selector: every requirement must hold. Empty selects everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

/// One requirement of a label selector.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    /// `k=v`, `k==v`: the label exists and equals the value.
    Equals(String, String),
    /// `k!=v`: the label is absent or differs.
    NotEquals(String, String),
    /// `k in (a,b)`: the label exists and is one of the values.
    In(String, BTreeSet<String>),
    /// `k notin (a,b)`: the label is absent or none of the values.
    NotIn(String, BTreeSet<String>),
    /// `k`: the label exists.
    Exists(String),
    /// `!k`: the label does not exist.
    DoesNotExist(String),
    /// `k>n`: the label is an integer greater than `n`.
    GreaterThan(String, i64),
    /// `k<n`: the label is an integer less than `n`.
    LessThan(String, i64),
}

impl LabelSelector {
    /// Parse a label selector. Empty (or only whitespace) selects everything.
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let tokens = lex(text)?;
        let mut parser = Parser { tokens, pos: 0 };
        let mut requirements = Vec::new();
        if parser.peek().is_none() {
            return Ok(Self { requirements });
        }
        loop {
            requirements.push(parser.requirement()?);
            match parser.next() {
                None => break,
                Some(Token::Comma) => {
                    if parser.peek().is_none() {
                        return Err(SelectorError::new("expected a requirement after ','"));
                    }
                }
                Some(other) => {
                    return Err(SelectorError::new(format!(
                        "found {}, expected ',' or the end",
                        other.describe()
                    )));
                }
            }
        }
        Ok(Self { requirements })
    }

    /// Whether the selector selects nothing out (it is empty).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether an object with these labels is selected.
    pub fn matches(&self, labels: &crate::plan::model::labels::Labels) -> bool {
        self.requirements.iter().all(|requirement| requirement.matches(labels))
    }
}

impl Requirement {
    fn matches(&self, labels: &crate::plan::model::labels::Labels) -> bool {
        match self {
            Self::Equals(key, value) => labels.get(key) == Some(value.as_str()),
            Self::NotEquals(key, value) => labels.get(key) != Some(value.as_str()),
            Self::In(key, values) => labels.get(key).is_some_and(|v| values.contains(v)),
            Self::NotIn(key, values) => !labels.get(key).is_some_and(|v| values.contains(v)),
            Self::Exists(key) => labels.contains_key(key),
            Self::DoesNotExist(key) => !labels.contains_key(key),
            Self::GreaterThan(key, bound) => {
                labels.get(key).and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v > *bound)
            }
            Self::LessThan(key, bound) => {
                labels.get(key).and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v < *bound)
            }
        }
    }
}

/// A lexical token of a label selector.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    /// A key, a value, or the words `in`/`notin`.
    Word(String),
    /// `!`
    Bang,
    /// `=`
    Eq,
    /// `==`
    DoubleEq,
    /// `!=`
    NotEq,
    /// `(`
    Open,
    /// `)`
    Close,
    /// `,`
    Comma,
    /// `>`
    Gt,
    /// `<`
    Lt,
}

impl Token {
    fn describe(&self) -> String {
        match self {
            Self::Word(word) => format!("{word:?}"),
            Self::Bang => "'!'".to_owned(),
            Self::Eq => "'='".to_owned(),
            Self::DoubleEq => "'=='".to_owned(),
            Self::NotEq => "'!='".to_owned(),
            Self::Open => "'('".to_owned(),
            Self::Close => "')'".to_owned(),
            Self::Comma => "','".to_owned(),
            Self::Gt => "'>'".to_owned(),
            Self::Lt => "'<'".to_owned(),
        }
    }
}

/// Characters that end a word.
fn is_special(c: char) -> bool {
    c.is_whitespace() || matches!(c, '!' | '=' | '(' | ')' | ',' | '<' | '>')
}

fn lex(text: &str) -> Result<Vec<Token>, SelectorError> {
    let mut tokens = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let token = match c {
            c if c.is_whitespace() => continue,
            '!' if chars.peek() == Some(&'=') => {
                chars.next();
                Token::NotEq
            }
            '!' => Token::Bang,
            '=' if chars.peek() == Some(&'=') => {
                chars.next();
                Token::DoubleEq
            }
            '=' => Token::Eq,
            '(' => Token::Open,
            ')' => Token::Close,
            ',' => Token::Comma,
            '>' => Token::Gt,
            '<' => Token::Lt,
            c if c.is_control() => {
                return Err(SelectorError::new(format!("control character {c:?}")));
            }
            c => {
                let mut word = String::from(c);
                while let Some(&next) = chars.peek() {
                    if is_special(next) {
                        break;
                    }
                    word.push(next);
                    chars.next();
                }
                Token::Word(word)
            }
        };
        tokens.push(token);
    }
    Ok(tokens)
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn next(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        token
    }

    /// Whether the next token ends a requirement (`,` or the end).
    fn at_requirement_end(&self) -> bool {
        matches!(self.peek(), None | Some(Token::Comma))
    }

    fn key(&mut self) -> Result<String, SelectorError> {
        match self.next() {
            Some(Token::Word(word)) if word == "in" || word == "notin" => {
                Err(SelectorError::new(format!("expected a label key, found keyword {word:?}")))
            }
            Some(Token::Word(word)) => {
                check_key(&word)?;
                Ok(word)
            }
            Some(other) => {
                Err(SelectorError::new(format!("expected a label key, found {}", other.describe())))
            }
            None => Err(SelectorError::new("expected a label key, found the end")),
        }
    }

    /// A single value after `=`, `==` or `!=`; may be empty (`k=`).
    fn value(&mut self) -> Result<String, SelectorError> {
        if self.at_requirement_end() {
            return Ok(String::new());
        }
        match self.next() {
            Some(Token::Word(word)) => {
                check_value(&word)?;
                Ok(word)
            }
            Some(other) => Err(SelectorError::new(format!(
                "expected a label value, found {}",
                other.describe()
            ))),
            None => Ok(String::new()),
        }
    }

    fn integer(&mut self, key: &str) -> Result<i64, SelectorError> {
        match self.next() {
            Some(Token::Word(word)) => word.parse().map_err(|_| {
                SelectorError::new(format!("{key}: {word:?} is not an integer (needed by > and <)"))
            }),
            Some(other) => Err(SelectorError::new(format!(
                "{key}: expected an integer, found {}",
                other.describe()
            ))),
            None => Err(SelectorError::new(format!("{key}: expected an integer, found the end"))),
        }
    }

    /// `( v1, v2, ... )`; values may be empty, the set may not.
    fn values(&mut self, key: &str, operator: &str) -> Result<BTreeSet<String>, SelectorError> {
        match self.next() {
            Some(Token::Open) => {}
            Some(other) => {
                return Err(SelectorError::new(format!(
                    "{key} {operator}: expected '(', found {}",
                    other.describe()
                )));
            }
            None => {
                return Err(SelectorError::new(format!(
                    "{key} {operator}: expected '(', found the end"
                )));
            }
        }
        let mut values = BTreeSet::new();
        if self.peek() == Some(&Token::Close) {
            return Err(SelectorError::new(format!("{key} {operator}: the value set is empty")));
        }
        loop {
            let value = match self.peek() {
                Some(Token::Word(word)) => {
                    let word = word.clone();
                    self.pos += 1;
                    check_value(&word)?;
                    word
                }
                Some(Token::Comma | Token::Close) => String::new(),
                Some(other) => {
                    return Err(SelectorError::new(format!(
                        "{key} {operator}: expected a value, found {}",
                        other.describe()
                    )));
                }
                None => {
                    return Err(SelectorError::new(format!("{key} {operator}: missing ')'")));
                }
            };
            values.insert(value);
            match self.next() {
                Some(Token::Comma) => {}
                Some(Token::Close) => return Ok(values),
                Some(other) => {
                    return Err(SelectorError::new(format!(
                        "{key} {operator}: expected ',' or ')', found {}",
                        other.describe()
                    )));
                }
                None => {
                    return Err(SelectorError::new(format!("{key} {operator}: missing ')'")));
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        if self.peek() == Some(&Token::Bang) {
            self.pos += 1;
            let key = self.key()?;
            if !self.at_requirement_end() {
                return Err(SelectorError::new(format!("!{key}: a negated key takes no operator")));
            }
            return Ok(Requirement::DoesNotExist(key));
        }
        let key = self.key()?;
        if self.at_requirement_end() {
            return Ok(Requirement::Exists(key));
        }
        match self.next() {
            Some(Token::Eq | Token::DoubleEq) => Ok(Requirement::Equals(key, self.value()?)),
            Some(Token::NotEq) => Ok(Requirement::NotEquals(key, self.value()?)),
            Some(Token::Gt) => {
                let bound = self.integer(&key)?;
                Ok(Requirement::GreaterThan(key, bound))
            }
            Some(Token::Lt) => {
                let bound = self.integer(&key)?;
                Ok(Requirement::LessThan(key, bound))
            }
            Some(Token::Word(word)) if word == "in" => {
                let values = self.values(&key, "in")?;
                Ok(Requirement::In(key, values))
            }
            Some(Token::Word(word)) if word == "notin" => {
                let values = self.values(&key, "notin")?;
                Ok(Requirement::NotIn(key, values))
            }
            Some(other) => Err(SelectorError::new(format!(
                "{key}: found {}, expected an operator (=, ==, !=, in, notin, >, <)",
                other.describe()
            ))),
            None => Ok(Requirement::Exists(key)),
        }
    }
}

/// Longest label name and value (Kubernetes `validation.LabelValueMaxLength`).
const MAX_NAME_LENGTH: usize = 63;

/// Longest key prefix (a DNS-1123 subdomain).
const MAX_PREFIX_LENGTH: usize = 253;

/// Why `key` is not a label key Kubernetes accepts (a qualified name), if it is not; for
/// fields that name a label, such as `limits.groupBy`.
pub(in crate::plan) fn label_key_problem(key: &str) -> Option<String> {
    check_key(key).err().map(|error| error.to_string())
}

/// A qualified name: `[prefix/]name`, prefix a DNS-1123 subdomain.
fn check_key(key: &str) -> Result<(), SelectorError> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && !is_dns_subdomain(prefix)
    {
        return Err(SelectorError::new(format!(
            "invalid label key {key:?}: the prefix must be a lowercase DNS subdomain of at \
             most {MAX_PREFIX_LENGTH} characters"
        )));
    }
    if name.is_empty() || !is_label_name(name) {
        return Err(SelectorError::new(format!(
            "invalid label key {key:?}: the name must be 1-{MAX_NAME_LENGTH} characters of \
             [A-Za-z0-9_.-], starting and ending with an alphanumeric character"
        )));
    }
    Ok(())
}

/// A label value: empty, or a label name.
fn check_value(value: &str) -> Result<(), SelectorError> {
    if value.is_empty() || is_label_name(value) {
        Ok(())
    } else {
        Err(SelectorError::new(format!(
            "invalid label value {value:?}: it must be at most {MAX_NAME_LENGTH} characters of \
             [A-Za-z0-9_.-], starting and ending with an alphanumeric character"
        )))
    }
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, at most 63 characters.
fn is_label_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            bytes.len() <= MAX_NAME_LENGTH
                && first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }
        (None, _) | (_, None) => false,
    }
}

/// A DNS-1123 subdomain: dot-separated lowercase labels of `[a-z0-9-]`, alphanumeric at
/// both ends, at most 253 characters.
fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_PREFIX_LENGTH
        && name.split('.').all(|label| {
            let bytes = label.as_bytes();
            match (bytes.first(), bytes.last()) {
                (Some(first), Some(last)) => {
                    (first.is_ascii_lowercase() || first.is_ascii_digit())
                        && (last.is_ascii_lowercase() || last.is_ascii_digit())
                        && bytes
                            .iter()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
                }
                (None, _) | (_, None) => false,
            }
        })
}

// === Field selectors ===

/// The one field a target can be selected by.
pub const FIELD_METADATA_NAME: &str = "metadata.name";

/// A parsed field selector over `metadata.name`: every term must hold. Empty selects
/// everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    terms: Vec<FieldTerm>,
}

/// One `metadata.name` term.
#[derive(Clone, Debug, PartialEq, Eq)]
enum FieldTerm {
    /// `metadata.name=x` or `metadata.name==x`.
    NameIs(String),
    /// `metadata.name!=x`.
    NameIsNot(String),
}

impl FieldSelector {
    /// Parse a field selector. Empty (or only whitespace) selects everything; empty terms
    /// (`a=b,`) are skipped, as Kubernetes does. `\,`, `\=` and `\\` escape in values.
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let mut terms = Vec::new();
        for term in split_unescaped(text, ',') {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            let (field, operator, value) = split_term(term).ok_or_else(|| {
                SelectorError::new(format!(
                    "invalid field selector term {term:?}: expected field=value, field==value \
                     or field!=value"
                ))
            })?;
            let field = field.trim();
            if field != FIELD_METADATA_NAME {
                return Err(SelectorError::new(format!(
                    "unsupported field selector {field:?}: only {FIELD_METADATA_NAME} is supported"
                )));
            }
            let value = unescape(value.trim())?;
            terms.push(match operator {
                FieldOperator::Equals => FieldTerm::NameIs(value),
                FieldOperator::NotEquals => FieldTerm::NameIsNot(value),
            });
        }
        Ok(Self { terms })
    }

    /// Whether the selector selects nothing out (it is empty).
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Whether an object with this name is selected.
    pub fn matches(&self, name: &str) -> bool {
        self.terms.iter().all(|term| match term {
            FieldTerm::NameIs(value) => name == value,
            FieldTerm::NameIsNot(value) => name != value,
        })
    }
}

enum FieldOperator {
    Equals,
    NotEquals,
}

/// Split `text` at every `separator` not preceded by a backslash escape.
fn split_unescaped(text: &str, separator: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == separator {
            parts.push(&text[start..i]);
            start = i + c.len_utf8();
        }
    }
    parts.push(&text[start..]);
    parts
}

/// Split a term at its first unescaped operator (`!=`, `==` or `=`).
fn split_term(term: &str) -> Option<(&str, FieldOperator, &str)> {
    let mut escaped = false;
    for (i, c) in term.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        let rest = &term[i..];
        if c == '\\' {
            escaped = true;
        } else if let Some(value) = rest.strip_prefix("!=") {
            return Some((&term[..i], FieldOperator::NotEquals, value));
        } else if let Some(value) = rest.strip_prefix("==") {
            return Some((&term[..i], FieldOperator::Equals, value));
        } else if let Some(value) = rest.strip_prefix('=') {
            return Some((&term[..i], FieldOperator::Equals, value));
        }
    }
    None
}

/// Undo `\\`, `\,`, `\=` and `\!` escapes; any other escape is an error.
fn unescape(value: &str) -> Result<String, SelectorError> {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some(escaped @ ('\\' | ',' | '=' | '!')) => out.push(escaped),
            Some(other) => {
                return Err(SelectorError::new(format!(
                    "invalid escape sequence \\{other} in field selector value {value:?}"
                )));
            }
            None => {
                return Err(SelectorError::new(format!(
                    "field selector value {value:?} ends with a lone backslash"
                )));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> crate::plan::model::labels::Labels {
        pairs.iter().copied().collect()
    }

    fn selects(selector: &str, pairs: &[(&str, &str)]) -> bool {
        LabelSelector::parse(selector).expect("parses").matches(&labels(pairs))
    }

    #[test]
    fn an_empty_label_selector_selects_everything() {
        assert!(LabelSelector::parse("").expect("parses").is_empty());
        assert!(selects("   ", &[]));
        assert!(selects("", &[("a", "b")]));
    }

    #[test]
    fn equality_operators_match_as_kubectl_does() {
        assert!(selects("role=edge", &[("role", "edge")]));
        assert!(selects("role==edge", &[("role", "edge")]));
        assert!(!selects("role=edge", &[("role", "core")]));
        assert!(!selects("role=edge", &[]));
        assert!(selects("role!=edge", &[]));
        assert!(selects("role!=edge", &[("role", "core")]));
        assert!(!selects("role!=edge", &[("role", "edge")]));
        assert!(selects("role=", &[("role", "")]));
        assert!(!selects("role=", &[]));
    }

    #[test]
    fn set_operators_match_as_kubectl_does() {
        assert!(selects("zone in (a, b)", &[("zone", "b")]));
        assert!(!selects("zone in (a,b)", &[("zone", "c")]));
        assert!(!selects("zone in (a,b)", &[]));
        assert!(selects("zone notin (a,b)", &[("zone", "c")]));
        assert!(selects("zone notin (a,b)", &[]));
        assert!(!selects("zone notin (a,b)", &[("zone", "a")]));
        assert!(selects("zone in (a,)", &[("zone", "")]));
    }

    #[test]
    fn existence_and_comparison_operators_match_as_kubectl_does() {
        assert!(selects("gpu", &[("gpu", "")]));
        assert!(!selects("gpu", &[]));
        assert!(selects("!gpu", &[]));
        assert!(!selects("!gpu", &[("gpu", "x")]));
        assert!(selects("rank>2", &[("rank", "3")]));
        assert!(!selects("rank>2", &[("rank", "two")]));
        assert!(selects("rank<2", &[("rank", "-1")]));
    }

    #[test]
    fn requirements_are_anded_and_whitespace_is_tolerated() {
        let selector = " role = edge ,  zone notin ( a , b ) , !gpu ";
        assert!(selects(selector, &[("role", "edge"), ("zone", "c")]));
        assert!(!selects(selector, &[("role", "edge"), ("zone", "a")]));
        assert!(!selects(selector, &[("role", "edge"), ("gpu", "1")]));
        assert!(selects("example.com/tier=a.b-c_d", &[("example.com/tier", "a.b-c_d")]));
    }

    #[test]
    fn malformed_label_selectors_are_errors() {
        for bad in [
            "role=edge,",
            ",role=edge",
            "role=edge,,zone=a",
            "zone in (a",
            "zone in ()",
            "zone in a",
            "zone notin",
            "role=edge=x",
            "role edge",
            "!role=edge",
            "-role=edge",
            "role=-edge",
            "Example.com/tier=a",
            "a/b/c=d",
            "/tier=a",
            "rank>two",
            "rank>",
            "in=a",
            "=a",
            "!",
        ] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad:?} parsed");
        }
        let long = "a".repeat(64);
        assert!(LabelSelector::parse(&format!("{long}=x")).is_err());
        assert!(LabelSelector::parse(&format!("x={long}")).is_err());
        assert!(LabelSelector::parse(&format!("x={}", "a".repeat(63))).is_ok());
    }

    #[test]
    fn label_selector_errors_say_what_is_wrong() {
        let err = LabelSelector::parse("zone in ()").expect_err("empty set");
        assert_eq!(err.to_string(), "zone in: the value set is empty");
        let err = LabelSelector::parse("role=edge,").expect_err("trailing comma");
        assert_eq!(err.to_string(), "expected a requirement after ','");
    }

    #[test]
    fn field_selectors_select_by_name_only() {
        let sel = FieldSelector::parse("metadata.name=w1").expect("parses");
        assert!(sel.matches("w1"));
        assert!(!sel.matches("w2"));
        let sel = FieldSelector::parse("metadata.name==w1").expect("parses");
        assert!(sel.matches("w1"));
        let sel = FieldSelector::parse(" metadata.name != w1 , metadata.name!=w2").expect("parses");
        assert!(sel.matches("w3"));
        assert!(!sel.matches("w2"));
        assert!(FieldSelector::parse("").expect("parses").is_empty());
        assert!(FieldSelector::parse("metadata.name=a,").expect("parses").matches("a"));
        let sel = FieldSelector::parse(r"metadata.name=a\,b").expect("parses");
        assert!(sel.matches("a,b"));
    }

    #[test]
    fn other_fields_and_malformed_terms_are_errors() {
        let err = FieldSelector::parse("spec.unschedulable=true").expect_err("unsupported");
        assert!(err.to_string().starts_with("unsupported field selector"), "{err}");
        assert!(FieldSelector::parse("metadata.name").is_err());
        assert!(FieldSelector::parse(r"metadata.name=a\x").is_err());
        assert!(FieldSelector::parse(r"metadata.name=a\").is_err());
        assert!(FieldSelector::parse("metadata.name=a,status.phase=b").is_err());
    }
}
